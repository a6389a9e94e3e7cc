# The README's commands. `make run`: the main job on the dev stack's defaults, no cluster needed.
# `make test`: lint, the project-file schema check and the whole test suite.
PYTHON ?= python3
VENV := .venv
INFRA_VENV := .venv-infra
STACK ?= dev

.PHONY: run render test lint golden schema infra-env clean

$(INFRA_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/pip install -q -e ".[infra]"
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e ".[infra,trainer,test]"
	touch $@

infra-env: $(INFRA_VENV)/.installed

run: render

render: $(INFRA_VENV)/.installed
	$(INFRA_VENV)/bin/python -m infra.render --stack $(STACK) --validate

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m infra.schema --check

test: lint
	$(VENV)/bin/python -m pytest

golden: $(VENV)/.installed
	UPDATE_GOLDEN=1 $(VENV)/bin/python -m pytest tests/infra/test_stacks.py -q

schema: $(VENV)/.installed
	$(VENV)/bin/python -m infra.schema

clean:
	rm -rf $(VENV) $(INFRA_VENV) build .pytest_cache .ruff_cache
