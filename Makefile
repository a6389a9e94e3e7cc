# The README's commands. `make run`: the dev stack's training job through the local scheduler, no
# cluster needed. `make test`: lint, the project-file schema check and the whole test suite.
PYTHON ?= python3
VENV := .venv
INFRA_VENV := .venv-infra
STACK ?= dev

.PHONY: run render test e2e lint golden schema infra-env lock clean

# Every install is constrained by constraints.txt, the full dependency closure that `make lock`
# resolves from pyproject.toml's pins (tests/ci/test_lock.py fails when it is stale).
$(INFRA_VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/pip install -q -c constraints.txt -e ".[infra]"
	touch $@

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints.txt -e ".[infra,trainer,test]"
	touch $@

infra-env: $(INFRA_VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/python -m infra.offline.local --stack $(STACK)

render: $(VENV)/.installed
	$(VENV)/bin/python -m infra.offline.render --stack $(STACK) --validate

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m infra.program.schema --check

# The workflows' lint (jactionlint with shellcheck) comes with .venv's test extra: tests/ci runs it.
test: lint
	$(VENV)/bin/python -m pytest

# The cluster tier (tests/e2e): needs the Pulumi CLI, docker, and kind or E2E_IMAGE_REGISTRY, against
# the current kubeconfig context; stops at once with one line (exit 4) without them. Never part of `test`.
e2e: $(VENV)/.installed $(INFRA_VENV)/.installed
	mkdir -p build/e2e
	$(VENV)/bin/python -m pytest -m e2e tests/e2e -s -v -p no:cacheprovider --junitxml=build/e2e/junit.xml

golden: $(VENV)/.installed
	UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest tests/infra/test_stacks.py -q

schema: $(VENV)/.installed
	$(VENV)/bin/python -m infra.program.schema

# After changing a pin in pyproject.toml or policy/requirements.txt (or to take newer transitive
# dependencies): re-resolve the whole closure from the package index into constraints.txt.
lock:
	$(PYTHON) constraints/lock.py

clean:
	rm -rf $(VENV) $(INFRA_VENV) build .pytest_cache .ruff_cache
