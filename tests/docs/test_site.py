"""The documentation site: it builds with --strict, every internal link and anchor resolves, every
command a tutorial gives is one the project has, and the README stays short."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from infra.program.common import yamlio
from tests.docs.pages import DOCS, ROOT, anchors, page, pages, paragraphs, shell_blocks

# Markdown links [text](target) and reference definitions [label]: target, outside fenced blocks.
INLINE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REFERENCE = re.compile(r"^\[[^\]]+\]:\s+(\S+)", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
TOOLS = {"pulumi", "kubectl", "docker", "kind", "minikube", "curl", "helm", "git"}


def links(text: str) -> list[str]:
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return INLINE.findall(text) + REFERENCE.findall(text)


def internal_link_problems(source: Path) -> list[str]:
    problems = []
    for target in links(source.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        where = f"{source.relative_to(ROOT)}: {target}"
        if not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{where}: no heading with that anchor")
    return problems


def test_the_site_builds_strict(tmp_path):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    build(config)  # raises on any warning under strict
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Run it locally" in index and "First deploy on kind or minikube" in index
    search = (tmp_path / "site" / "search" / "search_index.json").read_text()
    assert "tutorials/first-deploy/" in search and "explanation/retry-rule/" in search
    # A newcomer finds every key and every output from the site's search.
    from infra.program.common.outputs import OUTPUTS
    from infra.program.settings import SECRET_KEYS, Settings

    names = [f.alias for f in Settings.model_fields.values()] + list(SECRET_KEYS) + list(OUTPUTS)
    assert [n for n in names if n not in search] == []
    assert offsite_loads(tmp_path / "site") == []
    overview = (tmp_path / "site" / "overview" / "index.html").read_text()
    assert (
        '<img alt="The stack roles and the data flow' in overview
        and 'src="../assets/overview.svg"' in overview
    )


# What a page makes the browser fetch: scripts, stylesheets, fonts, images, frames; and what a
# stylesheet imports. A plain link (`<a href>`) is not fetched.
FETCHED = re.compile(
    r"<(?:script|img|iframe|source|video|audio|embed)\b[^>]*?\bsrc=[\"']?(?P<src>[^\"'\s>]+)"
    r"|<link\b[^>]*?\bhref=[\"']?(?P<href>[^\"'\s>]+)",
    re.IGNORECASE,
)
CSS_URL = re.compile(r"(?:@import\s+(?!url\()|url\()\s*[\"']?(?P<url>[^\"')\s;]+)")


def offsite_loads(site: Path) -> list[str]:
    """Every fetch a built page or stylesheet would make to another host (http:, https: or //host), and
    the theme's repository widget (with `repo_url` its script asks GitHub's API for stars and forks)."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css", ".svg"):
            continue
        text = path.read_text()
        styles = re.findall(r"<style[^>]*>(.*?)</style>", text, re.S)
        css = " ".join(styles) if path.suffix == ".html" else text
        urls = [m["url"] for m in CSS_URL.finditer(css)]
        if path.suffix == ".html":
            urls = [m["src"] or m["href"] for m in FETCHED.finditer(text)] + urls
            if re.search(r"\bdata-md-component=[\"']?source\b", text):
                urls.append("//api.github.com (the theme's repository widget)")
        found += [f"{path.relative_to(site)}: {u}" for u in urls if re.match(r"(?:https?:)?//", u)]
    return found


def test_the_offsite_check_finds_what_a_page_would_fetch(tmp_path):
    page = tmp_path / "p" / "index.html"
    page.parent.mkdir()
    page.write_text(
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<script src=//cdn.example/x.js></script><a href="https://github.com/x">repo</a>'
        '<img src="../assets/overview.svg"><style>@import url("https://fonts.example/f.css");</style>'
        '<div data-md-component="source"></div>'
    )
    (tmp_path / "a.css").write_text("body{background:url(https://img.example/b.png)} i{src:url(f.woff2)}")
    assert offsite_loads(tmp_path) == [
        "a.css: https://img.example/b.png",
        "p/index.html: https://fonts.googleapis.com/css?family=Roboto",
        "p/index.html: //cdn.example/x.js",
        "p/index.html: https://fonts.example/f.css",
        "p/index.html: //api.github.com (the theme's repository widget)",
    ]


def nav_pages(nav) -> list[str]:
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_the_nav_holds_every_page_once_and_every_page_is_in_it():
    config = yamlio.load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed))
    assert set(listed) == {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}


def test_every_internal_link_and_anchor_resolves():
    problems = [problem for source in pages() for problem in internal_link_problems(source)]
    assert problems == []


def test_the_link_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    source = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading\n")
    source.write_text(
        "[ok](other.md#a-code-heading) [gone](missing.md) [bad](other.md#nope) [self](#title)\n# Title\n"
    )
    relative = Path(source)
    problems = [p.split(": ", 1)[1] for p in _problems_under(tmp_path, relative)]
    assert problems == ["missing.md: no such file", "other.md#nope: no heading with that anchor"]


def _problems_under(root: Path, source: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return internal_link_problems(source)
    finally:
        ROOT = saved


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def command_problem(argv: list[str]) -> str | None:
    """Why a tutorial's command is not one the project has, or None."""
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    tool = argv[0]
    if tool == "export" and all(re.fullmatch(r"[A-Z_]+=.*", a) for a in argv[1:]):
        return None  # a shell variable the reader sets: `export NAME=value`
    if tool == "make":
        targets = [a for a in argv[1:] if not a.startswith("-") and "=" not in a]
        unknown = set(targets) - make_targets()
        return f"no make target {sorted(unknown)}" if unknown else None
    if Path(tool).name in ("python", "python3"):
        if argv[1:2] == ["-c"]:
            return None
        if argv[1:2] == ["-m"]:
            module = argv[2]
            found = (ROOT / module.replace(".", "/")).with_suffix(".py").exists() or (
                ROOT / module.replace(".", "/") / "__main__.py"
            ).exists()
            return None if found or importlib.util.find_spec(module) else f"no module {module}"
        return None if (ROOT / argv[1]).exists() else f"no script {argv[1]}"
    if tool in TOOLS:
        return None
    if "/" in tool:
        return None if (ROOT / tool).exists() or tool.startswith(".venv/bin/") else f"no script {tool}"
    return f"{tool} is not a command the project has or an allowed tool"


def tutorial_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted((DOCS / "tutorials").glob("*.md")):
        for block in shell_blocks(path.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|>")
                lexer.whitespace_split, lexer.commenters = True, "#"
                argv: list[str] = []
                for token in [*lexer, ";"]:
                    if token in (">", ">>"):
                        argv.append(token)
                    elif set(token) <= set(";&|"):
                        if argv:
                            found.append((path.name, _without_redirects(argv)))
                        argv = []
                    else:
                        argv.append(token)
    return found


def _without_redirects(argv: list[str]) -> list[str]:
    """The command without `> FILE`."""
    out, skip = [], False
    for token in argv:
        if token in (">", ">>"):
            skip = True
        elif skip:
            skip = False
        else:
            out.append(token)
    return out


def test_every_tutorial_command_is_one_the_project_has():
    commands = tutorial_commands()
    assert {"make", "pulumi", "kubectl", "curl"} <= {argv[0] for _, argv in commands}
    problems = [
        f"{name}: {shlex.join(argv)}: {why}" for name, argv in commands if (why := command_problem(argv))
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["make", "run"], None),
        (["make", "deploy-everything"], "no make target ['deploy-everything']"),
        (["python", "-m", "infra.local", "--stack", "dev"], None),
        (["python", "-m", "infra.nothing"], "no module infra.nothing"),
        (["terraform", "apply"], "terraform is not a command the project has or an allowed tool"),
        (["kubectl", "get", "pods"], None),
    ],
)
def test_the_command_checker_tells_known_from_unknown(argv, problem):
    assert command_problem(argv) == problem


def test_the_readme_is_at_most_200_lines_and_names_the_two_commands():
    readme = page("README.md")
    assert len(readme.splitlines()) <= 200
    (block,) = [b for b in shell_blocks(readme) if b.startswith("make run")]
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "run"], ["make", "test"]]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make")]
    assert ci == ["make run", "make test"]


LONGEST_PARAGRAPH = 10  # lines: past that, prose wants a list, a table or a heading


def test_no_hand_written_paragraph_runs_over_ten_lines():
    generated = {p for p in (DOCS / "reference").glob("*.md") if p.read_text().startswith("---\nsearch:")}
    long = [
        f"{source.relative_to(ROOT)}:{start}: {len(lines)} lines"
        for source in pages()
        if source not in generated
        for start, lines in paragraphs(source.read_text())
        if len(lines) > LONGEST_PARAGRAPH
    ]
    assert long == []


def test_the_paragraph_reader_counts_prose_not_lists_or_code():
    text = "intro\n\n" + "word\n" * 11 + "\n- item\n  more\n- next\n\n```sh\n" + "x\n" * 20 + "```\n"
    assert [(start, len(lines)) for start, lines in paragraphs(text)] == [(1, 1), (3, 11), (15, 2), (17, 1)]


def test_the_tutorials_cluster_is_the_version_the_stacks_target_and_the_kind_workflow_pins():
    """kind's node image is the e2e-kind workflow's, by digest; minikube's version is the same; both are
    the `kubernetesVersion` the dev stacks target."""
    from infra.program.settings import PROJECT
    from infra.stackconfig import load_stack

    lines = [" ".join(argv) for name, argv in tutorial_commands() if name == "first-deploy.md"]
    (kind,) = [line for line in lines if line.startswith("kind create cluster")]
    (minikube,) = [line for line in lines if line.startswith("minikube start")]
    workflow = (ROOT / ".github" / "workflows" / "e2e-kind.yml").read_text()
    (pinned,) = re.findall(r"node_image: (\S+)", workflow)
    assert kind == f"kind create cluster --image {pinned}"
    assert re.fullmatch(r"kindest/node:v[\d.]+@sha256:[0-9a-f]{64}", pinned)
    version = pinned.split(":v", 1)[1].split("@", 1)[0]
    assert f"--kubernetes-version=v{version}" in minikube.split()
    assert "--cni=calico" in minikube.split()  # a CNI that enforces NetworkPolicy
    for stack in ("dev", "dev-prereqs"):
        target = load_stack(stack).values[f"{PROJECT}:kubernetesVersion"]
        assert version.startswith(f"{target}."), (stack, target, version)


def test_the_overview_diagram_is_a_self_contained_svg_that_names_every_stack_role():
    """Parsed as XML (a browser shows nothing of a malformed SVG); no reference to another file or host;
    a title and a description for screen readers; each role and each step of the run on it."""
    import xml.etree.ElementTree as ET

    svg = (DOCS / "assets" / "overview.svg").read_text()
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert (
        root.tag == f"{ns}svg" and root.find(f"{ns}title") is not None and root.find(f"{ns}desc") is not None
    )
    refs = [v for el in root.iter() for k, v in el.attrib.items() if k.endswith("href") or k == "src"]
    assert refs == [] and "url(http" not in svg and "@import" not in svg
    text = " ".join(el.text or "" for el in root.iter(f"{ns}text"))
    for shown in (
        "prerequisites stack",
        "platform stack",
        "job stack",
        "stackRole all",
        "MinIO",
        "fill Job",
        "seed Job",
        "data claim",
        "training job",
        "checkpoint claim",
        "model server",
        "client",
    ):
        assert shown in text, shown
