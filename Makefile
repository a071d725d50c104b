# Top-level entry points. Each target does its own set-up (Debian packages, configure, build),
# so they work as the first command on a fresh machine.
BUILD    ?= build
TYPE     ?= RelWithDebInfo
PYTHON   ?= /usr/bin/python3
JOBS     ?= $(shell nproc)
CTEST_JOBS ?= 2

.PHONY: all deps configure build test test-cpp test-python demo format clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(TYPE) -DCADRE_WERROR=ON \
	  -DPython3_EXECUTABLE=$(PYTHON)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	$(MAKE) --no-print-directory test-cpp test-python

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(CTEST_JOBS) --timeout 600

test-python:
	@dirs="$$(for d in python/tests tests; do [ -d $$d ] && echo $$d; done)"; \
	if [ -z "$$dirs" ]; then echo "no Python tests"; exit 0; fi; \
	CADRE_BUILD_DIR=$(abspath $(BUILD)) PYTHONPATH=$(abspath $(BUILD))/python:$(abspath python) \
	  $(PYTHON) -m pytest -q -p no:cacheprovider $$dirs

# The main job: distributed Fashion-MNIST training on this machine.
demo: build
	$(BUILD)/cadre run examples/fashion_mnist/horovod.yaml

format:
	git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
