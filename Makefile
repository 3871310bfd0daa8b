# Two entry points: `make run` (set up + launch) and `make test` (set up + test). Both create .venv if missing.
# `make run` installs requirements.txt (the app); `make test` also requirements-dev.txt (tests, checks, Ray).
VENV ?= .venv
PY := $(VENV)/bin/python
OFFLINE := HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False
TINY_DIR ?= /tmp/sapiens2-tiny
# run-standin's checkpoints: empty = built once into the user's cache (~/.cache/sapiens2-demo/standins-<hash of the
# training code>) and reused; a folder = trained there when it has no STANDINS.txt
STANDIN_DIR ?=
# pytest-xdist workers for make test: one a core, at most 4, each given whole files, the longest first (tests/conftest.py;
# 6-7.5 minutes on 2 idle cores, docs/tests.md); 0: one process
TEST_WORKERS ?= auto

.PHONY: setup setup-dev run run-tiny run-standin lint test browser-deps bench bench-cpu

$(VENV)/.installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.installed

setup-dev: $(VENV)/.installed-dev

run: setup  ## launch on http://127.0.0.1:7860 (pass flags with ARGS="--checkpoint-dir DIR")
	$(PY) app.py $(ARGS)

run-tiny: setup  ## launch on tiny random-weight checkpoints: works offline, outputs are noise
	$(OFFLINE) $(PY) -m sapiens2_demo.standins $(TINY_DIR) --detector
	$(OFFLINE) $(PY) app.py --checkpoint-dir $(TINY_DIR) --detector $(TINY_DIR)/yolov8n-random.pt $(ARGS)

run-standin: setup  ## launch on stand-ins: tiny checkpoints trained ~2 minutes on synthetic targets, once (not models)
	@dir='$(STANDIN_DIR)'; \
	if [ -z "$$dir" ]; then dir=$$($(OFFLINE) $(PY) -m sapiens2_demo.standins --trained | tail -n 1) || exit 1; \
	elif [ ! -f "$$dir/STANDINS.txt" ]; then \
	  echo "Stand-in checkpoints: training them into $$dir (about 2 minutes on 2 idle cores; stand-ins, not models)"; \
	  $(OFFLINE) $(PY) -m sapiens2_demo.standins "$$dir" --trained --detector >/dev/null || exit 1; fi; \
	echo "Launching the app on the stand-in checkpoints in $$dir"; \
	$(OFFLINE) $(PY) app.py --checkpoint-dir "$$dir" --detector "$$dir/yolov8n-random.pt" $(ARGS)

browser-deps:  ## Debian's chromium for the Playwright test (root only; otherwise that test is skipped)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: the browser test will be skipped"; }

lint: setup-dev  ## ruff, and the layers contract (pyproject.toml): lower layers never import higher ones
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/lint-imports

test: setup-dev browser-deps lint
	$(OFFLINE) $(PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: setup-dev  ## the quick benchmarks on tiny checkpoints and stand-ins; NAME=video ARGS="..." runs one (docs/benchmarks.md)
	$(OFFLINE) $(PY) -m benchmarks $(if $(NAME),$(NAME) $(ARGS),quick)

bench-cpu: setup-dev  ## full-size random-weight forwards on this CPU, float32 vs its fastest road (many minutes)
	$(OFFLINE) $(PY) -m benchmarks cpu $(ARGS)
