# ckptrescue — the two commands: `make demo` and `make test`. Both set up first when needed.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The interpreter .venv is made from: the distribution's /usr/bin/python3 when it is 3.11 or
# newer and has venv, else the first python3 on the PATH. It is the interpreter a fresh Debian
# or Ubuntu machine has (the one the README's two commands promise), and they build it with
# profile-guided and link-time optimisation: here it starts the kit ~20 ms sooner and runs pure
# Python ~1.3x faster than a default pyenv build. `make setup PYTHON=/path/to/python3` chooses
# another; an existing .venv is kept as it is (remove it to make it again).
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' \
            >/dev/null 2>&1 && echo /usr/bin/python3 || echo python3)
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.ckptrescue-setup
# zfs-fuse: a real userspace ZFS (pool version 23) for the ZFS tests (docs/storage.md); not on a
# host that has OpenZFS's zfsutils-linux, whose zpool/zfs it would collide with.
ZFS_FUSE := $(if $(shell dpkg-query -W -f='$${Status}' zfsutils-linux 2>/dev/null | grep -q "install ok installed" && echo openzfs),,zfs-fuse)
APT_PACKAGES := gddrescue xfsprogs e2fsprogs btrfs-progs util-linux rsync smartmontools nvme-cli dmsetup lvm2 \
                libfuse2 chromium tmux bubblewrap dosfstools nodejs sshfs openssh-server $(ZFS_FUSE)
DEMO_DIR ?= demo-out
# Azurite (the Azure Blob emulator of tests/stores) from npm, under build/, only for setup/test.
AZURITE_VERSION := 3.35.0
AZURITE := build/azurite/node_modules/.bin/azurite-blob

.PHONY: setup setup-parts system-packages azurite bytecode test demo bench lint clean help docs

help:
	@echo "make demo   - set up if needed, run the drill incident end to end, print the report path"
	@echo "make test   - set up if needed, run the whole test suite"
	@echo "make bench  - benchmarks (ratios against anchors measured in the same run)"
	@echo "make fuzz   - long fuzz run (FUZZ_CASES=100000 corpus cases, FUZZ_EXPLORE=200 hypothesis batches)"
	@echo "make lint   - ruff"
	@echo "make setup  - system packages (apt-get, as root), .venv, editable install with all extras and the fixture writers"

# Its parts run at once (apt-get, pip and npm mostly wait on the network and the disk); Azurite's
# npm install waits for the system packages (nodejs is one of them).
setup:
	@$(MAKE) --no-print-directory -j3 setup-parts \
		WITH_AZURITE=$(if $(filter setup test,$(MAKECMDGOALS)),1)

setup-parts: system-packages $(STAMP) $(if $(WITH_AZURITE),azurite)

azurite: | system-packages
	@if [ ! -x $(AZURITE) ]; then \
	  if command -v npm >/dev/null 2>&1; then \
	    echo "installing azurite@$(AZURITE_VERSION) under build/azurite"; \
	    npm install --prefix build/azurite --no-audit --no-fund --silent azurite@$(AZURITE_VERSION); \
	  else \
	    echo "warning: npm missing: the Azure Blob tests cannot start Azurite" >&2; \
	  fi; \
	fi

system-packages:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "warning: missing system packages (run make setup as root):$$missing" >&2; \
	  fi; \
	fi

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[all,fixtures]'
	@touch $(STAMP)

# pytest-xdist: one worker per core and one more, which keeps the cores busy while a test waits
# on a child, a server or a timeout (TEST_WORKERS=0 runs in one process). The TUI tests share
# fixed-path screens and run in one worker, the privileged ones (loop devices, mounts) in
# another (--dist loadgroup; tests/conftest.py).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Every command the tests, the demo and the benchmarks start imports the kit anew: its bytecode
# is written once here (also where PYTHONDONTWRITEBYTECODE is set), not compiled per process.
bytecode:
	@$(PY) -m compileall -q -j 0 ckptrescue tests fixtures bench >/dev/null

# A worker that dies (a crash, a kill) ends the run at once, naming the test it was running
# ("worker 'gwN' crashed while running ..."): pytest-xdist 3.8 under --dist loadgroup otherwise
# either reruns that test in worker after worker or waits forever for the dead worker's group.
test: setup bytecode
	$(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup \
		--max-worker-restart=0 tests

# The drill serves its bucket on 127.0.0.1 with moto, which accepts any credentials.
demo: export AWS_ACCESS_KEY_ID = drill
demo: export AWS_SECRET_ACCESS_KEY = drill
demo: setup bytecode
	@if [ -d $(DEMO_DIR)/drill ]; then $(VENV)/bin/ckptrescue drill $(DEMO_DIR)/drill --stop >/dev/null; fi
	@rm -rf $(DEMO_DIR)
	@set -e; trap '$(VENV)/bin/ckptrescue drill $(DEMO_DIR)/drill --stop >/dev/null' EXIT; \
	$(VENV)/bin/ckptrescue drill $(DEMO_DIR)/drill; \
	rc=0; $(VENV)/bin/ckptrescue playbook run full-incident --case $(DEMO_DIR)/case --yes \
	    --title "drill: training run will not resume" -P $(DEMO_DIR)/drill/params.json || rc=$$?; \
	if [ $$rc -gt 1 ]; then echo "demo: the playbook failed (exit $$rc)" >&2; exit $$rc; fi; \
	$(VENV)/bin/ckptrescue report $(DEMO_DIR)/case --format html -o $(DEMO_DIR)/report.html; \
	echo; echo "answer: $$($(VENV)/bin/python -m ckptrescue.engine.answer $(DEMO_DIR)/case)"; \
	echo "report: $$(realpath $(DEMO_DIR)/report.html)"

FUZZ_CASES ?= 100000
FUZZ_EXPLORE ?= 200
.PHONY: fuzz
fuzz: setup bytecode
	CKPTRESCUE_FUZZ_CASES=$(FUZZ_CASES) CKPTRESCUE_FUZZ_EXPLORE=$(FUZZ_EXPLORE) CKPTRESCUE_FUZZ_ORACLE=1000 \
	    $(VENV)/bin/pytest -q -p no:cacheprovider -o timeout=0 tests/fuzz

bench: setup bytecode
	$(PY) bench/run_all.py

lint: setup
	$(VENV)/bin/ruff check ckptrescue tests fixtures bench

# the generated reference pages, then the README screenshots (docs/screenshots.py: chromium)
docs: setup
	$(PY) docs/generate.py --screenshots

clean:
	rm -rf build dist *.egg-info $(DEMO_DIR) bench-out
