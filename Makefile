# The staged DeepSeek CPU engine. `make help` lists the targets.
#
# Every stages/NN_name/ folder builds build/NN_name/engine (same CLI) and build/NN_name/tests (the
# one shared Catch2 suite linked against that stage). common/ is compiled once and linked into all.

SHELL := /bin/bash
CXX ?= g++
PYTHON := /usr/bin/python3
OPT := -O3 -march=native
CXXFLAGS := -std=c++20 $(OPT) -Wall -Wextra -Wshadow -MMD -MP -Icommon
LDLIBS := -lpcre2-8
# The chat page as a C++ string, linked into every server.
build/common/server_page.cpp: common/server_page.html
	@mkdir -p $(@D)
	{ printf 'extern const char kServerPage[];\nconst char kServerPage[] = R"PAGE('; cat $<; printf ')PAGE";\n'; } > $@
build/common/server_page.o: build/common/server_page.cpp
	$(CXX) $(CXXFLAGS) -c $< -o $@
# cpp-httplib as Debian builds it (its .pc file): the same options, or the classes differ.
HTTPLIB_FLAGS := -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
HTTPLIB_LIBS := -lcpp-httplib -lssl -lcrypto -pthread

STAGES := $(sort $(notdir $(wildcard stages/[0-9][0-9]_* stages/[0-9][0-9]x*_*)))
LAST := $(lastword $(STAGES))
# STAGE=04 or STAGE=04_openmp; default: the last stage. STAGES_TO_TEST: all, or STAGE if given.
STAGE ?= $(LAST)
SEL := $(firstword $(filter $(STAGE)%,$(STAGES)))
ifeq ($(origin STAGE),command line)
  TEST_STAGES := $(SEL)
else
  TEST_STAGES := $(STAGES)
endif

# Stages with SIMD kernels (simd.h) are also tested as built with their scalar fallback only
# (NN-scalar), and with the native (NN-check) and AVX2 (NN-avx2) paths checked against it (to
# fp32 rounding in stage 08, bit for bit from stage 09 on).
SIMD_STAGES := $(foreach s,$(STAGES),$(if $(wildcard stages/$(s)/simd.h),$(s)))
# Stages with AMX tiles (amx.h) also as built without them (NN-noamx, checked bit for bit), so
# that a machine with AMX tests the AVX-512 path they fall back to.
AMX_STAGES := $(foreach s,$(SIMD_STAGES),$(if $(wildcard stages/$(s)/amx.h),$(s)))
TEST_VARIANTS := $(foreach s,$(filter $(TEST_STAGES),$(SIMD_STAGES)),$(s)-scalar $(s)-check $(s)-avx2) \
  $(foreach s,$(filter $(TEST_STAGES),$(AMX_STAGES)),$(s)-noamx)

COMMON_SRC := $(filter-out common/main.cpp common/server.cpp,$(wildcard common/*.cpp))
COMMON_OBJ := $(COMMON_SRC:common/%.cpp=build/common/%.o)
TEST_SRC := $(wildcard tests/*.cpp)
TEST_OBJ := $(TEST_SRC:tests/%.cpp=build/tests/%.o)
STAGE_TEST_SRC := $(wildcard tests/stage/*.cpp)

# The default model: tiny-kjv, trained by the project on the King James Bible (data/README.md).
DEFAULT_MODEL := data/models/tiny-kjv-q4_0.gguf
MODEL ?= $(DEFAULT_MODEL)
PROMPT ?= And it came to pass
N ?= 64

.PHONY: all run test bench docs diff clean deps models golden model-7b model-v2-lite help train-tiny
all: $(foreach s,$(STAGES),build/$(s)/engine) $(foreach s,$(SERVER_STAGES),build/$(s)/server)

help:
	@echo "make run [STAGE=NN] [MODEL=file.gguf] [PROMPT=...]  stream a generation"
	@echo "make test [STAGE=NN]    the shared suite on every stage (or one)"
	@echo "make diff FROM=NN TO=NN show what one stage adds to another"
	@echo "make models | golden | model-7b | model-v2-lite    test models, goldens, 7B/V2-Lite-shaped files"
	@echo "make quantize           build/quantize IN.gguf OUT.gguf TYPE (as llama-quantize)"
	@echo "make ppl                perplexity and KL divergence of each type (docs/perplexity.md)"

deps:
	@bash tools/deps.sh

build/common/%.o: common/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# ggml's reference quantizers (common/quant.cpp, quant_k.cpp) write ggml's bytes only if no a*b+c
# is fused into one FMA, which rounds once instead of twice (-march=native allows it, clang does it
# by default). Every build of the two files, sanitizer and fuzz builds included.
NO_FMA_OBJ := $(foreach d,build build/sanitize build/fuzz,$(d)/common/quant.o $(d)/common/quant_k.o)
$(NO_FMA_OBJ): CXXFLAGS += -ffp-contract=off
$(NO_FMA_OBJ): SAN_FLAGS += -ffp-contract=off
$(NO_FMA_OBJ): FUZZ_CXXFLAGS += -ffp-contract=off

build/tests/catch_main.o: tests/support/catch_main.cc
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

build/tools/%.o: tools/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

build/tests/%.o: tests/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -Itests -DPROJECT_ROOT='"$(CURDIR)"' -c $< -o $@

# Per-stage rules: stage.mk may set STAGE_CXXFLAGS (e.g. -fopenmp from stage 04 on) and
# STAGE_LDLIBS (MPI from stage 24 on).
define STAGE_RULES
STAGE_CXXFLAGS :=
STAGE_LDLIBS :=
STAGE_SERVER :=
include stages/$(1)/stage.mk
FLAGS_$(1) := $$(STAGE_CXXFLAGS)
LIBS_$(1) := $$(STAGE_LDLIBS)
SERVER_$(1) := $$(STAGE_SERVER)
OBJ_$(1) := $$(patsubst stages/$(1)/%.cpp,build/$(1)/%.o,$$(wildcard stages/$(1)/*.cpp))
build/$(1)/%.o: stages/$(1)/%.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) -Istages/$(1) -c $$< -o $$@
build/$(1)/main.o: common/main.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) -DSTAGE_NAME='"$(1)"' -c $$< -o $$@
build/$(1)/engine: $$(OBJ_$(1)) build/$(1)/main.o $(COMMON_OBJ)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
# tests/stage/: tests of a stage's own parts, compiled with its headers (each file tests the
# stages that have what it tests, by __has_include).
build/$(1)/stage_tests/%.o: tests/stage/%.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) -Itests -Istages/$(1) -c $$< -o $$@
build/$(1)/tests: $$(OBJ_$(1)) $(STAGE_TEST_SRC:tests/stage/%.cpp=build/$(1)/stage_tests/%.o) \
  $(TEST_OBJ) build/tests/catch_main.o $(COMMON_OBJ)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
# The server (common/server.cpp, docs/server.md), for stages whose stage.mk sets STAGE_SERVER.
build/$(1)/server.o: common/server.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $(HTTPLIB_FLAGS) -DSTAGE_NAME='"$(1)"' -c $$< -o $$@
build/$(1)/server: $$(OBJ_$(1)) build/$(1)/server.o build/common/server_page.o $(COMMON_OBJ)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1)) $(HTTPLIB_LIBS)
# bench_kernels is compiled per stage: from stage 13 on it times linear() on weights packed as
# the engine packs them at load (matmul.h defines ENGINE_PACKS_WEIGHTS).
# Its own read-and-sum (bench-stream) uses OpenMP in every stage; the stage's kernels do not.
build/$(1)/bench_kernels.o: tools/bench_kernels.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) -fopenmp -Istages/$(1) -c $$< -o $$@
build/$(1)/bench_kernels: $$(OBJ_$(1)) build/$(1)/bench_kernels.o $(COMMON_OBJ)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) -fopenmp $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
endef
$(foreach s,$(STAGES),$(eval $(call STAGE_RULES,$(s))))
SERVER_STAGES := $(foreach s,$(STAGES),$(if $(filter yes,$(SERVER_$(s))),$(s)))

-include $(wildcard build/*/*.d build/*/stage_tests/*.d build/sanitize/*/*.d)

# libFuzzer targets (make fuzz, make fuzz-long): tests/fuzz/fuzz.mk.
-include tests/fuzz/fuzz.mk

run: deps build/$(SEL)/engine
	@echo "stage $(SEL), model $(MODEL)" >&2
	build/$(SEL)/engine -m "$(MODEL)" -p "$(PROMPT)" -n $(N)

test: deps $(foreach s,$(TEST_STAGES),build/$(s)/tests build/$(s)/engine) $(TEST_VARIANTS:%=build/%/tests) \
  build/$(SEL)/engine python $(if $(filter $(TEST_STAGES),$(SERVER_STAGES)),server-deps) \
  $(foreach s,$(filter $(TEST_STAGES),$(SERVER_STAGES)),build/$(s)/server)
	@bash tests/run_all.sh --python $(TEST_STAGES) $(TEST_VARIANTS)

DIFF_FROM = $(firstword $(filter $(FROM)%,$(STAGES)))
DIFF_TO = $(firstword $(filter $(TO)%,$(STAGES)))
diff:
	@test -n "$(FROM)" -a -n "$(TO)" || { echo "usage: make diff FROM=03 TO=04" >&2; exit 2; }
	@test -n "$(DIFF_FROM)" -a -n "$(DIFF_TO)" || { echo "make diff: no stage folder stages/$(if $(DIFF_FROM),$(TO),$(FROM))*" >&2; exit 2; }
	@diff -ruN stages/$(DIFF_FROM) stages/$(DIFF_TO); true

models:
	$(PYTHON) tools/make_models.py --out data/models

golden: models
	$(PYTHON) tools/reference.py --models data/models --out data/golden

# Retrain the default model (~30 min on 2 cores; needs bible-kjv and python3-torch).
train-tiny: build/01_naive/engine
	@bash tools/deps.sh bible-kjv python3-torch
	$(PYTHON) tools/train_tiny.py --out data/models --engine build/01_naive/engine

model-7b:
	$(PYTHON) tools/make_models.py --preset deepseek-7b --output-type q4_0 --out build/models

# DeepSeek-V2-Lite's shape (deepseek2: MLA, 64 experts, 6 used), random Q4_0 (output Q6_K, as
# llama-quantize writes Q4_0 files), 8.9 GB, ~70 s: build/models/deepseek-v2-lite-q4_0.gguf.
model-v2-lite:
	$(PYTHON) tools/make_models.py --preset deepseek-v2-lite --out build/models

clean:
	rm -rf build

print-flags:
	@echo "$(CXXFLAGS)"

# Benchmarks (not tests): make bench [STAGE=03x | ONLY="01 05"] [MODEL=file.gguf] [THREADS=2] [RUNS=3]
#   [LLAMA_BENCH="label=/path/to/llama-bench ..."]: llama.cpp run interleaved with the stages, on the
#   same file, prompt, token count and threads (build it yourself: docs/benchmarks.md, "llama.cpp").
BENCH_MODEL ?= build/models/bench-small-q4_0.gguf
THREADS ?= $(shell nproc)
RUNS ?= 3
PROMPT_TOKENS ?= 64
GEN_TOKENS ?= 32
# STAGE=xx (e.g. a learner's 03x) benches stage 01 and that stage; ONLY="..." any list; the
# default, every stage, also rewrites the README's stage map.
ifneq ($(ONLY),)
  BENCH_STAGES = $(foreach s,$(ONLY),$(firstword $(filter $(s)%,$(STAGES))))
else ifeq ($(origin STAGE),command line)
  BENCH_STAGES = $(firstword $(STAGES)) $(SEL)
else
  BENCH_STAGES = $(STAGES)
  BENCH_README = --readme
endif
bench: deps build/membench $(foreach s,$(BENCH_STAGES),build/$(s)/engine)
	@test -f "$(if $(filter command line,$(origin MODEL)),$(MODEL),$(BENCH_MODEL))" || $(PYTHON) tools/make_models.py --preset bench-small --out build/models
	$(PYTHON) tools/bench.py --stages $(BENCH_STAGES) --model $(if $(filter command line,$(origin MODEL)),$(MODEL),$(BENCH_MODEL)) \
	  --threads $(THREADS) --runs $(RUNS) --prompt-tokens $(PROMPT_TOKENS) --gen-tokens $(GEN_TOKENS) $(BENCH_README) \
	  $(if $(LLAMA_BENCH),--llama-bench $(LLAMA_BENCH))

# Decode with 1 and 2 threads, quiet and with one core kept busy, for the OpenMP stages (04 on) or
# ONLY="..."; LLAMA_BENCH as for make bench.
CONTENDED_STAGES = $(if $(ONLY),$(BENCH_STAGES),$(filter-out $(wordlist 1,3,$(STAGES)),$(filter-out %x,$(STAGES))))
bench-contended: deps build/membench $(foreach s,$(CONTENDED_STAGES),build/$(s)/engine)
	@test -f "$(if $(filter command line,$(origin MODEL)),$(MODEL),$(BENCH_MODEL))" || $(PYTHON) tools/make_models.py --preset bench-small --out build/models
	$(PYTHON) tools/bench.py --contended --stages $(CONTENDED_STAGES) --model $(if $(filter command line,$(origin MODEL)),$(MODEL),$(BENCH_MODEL)) \
	  --runs $(RUNS) --gen-tokens $(GEN_TOKENS) $(if $(LLAMA_BENCH),--llama-bench $(LLAMA_BENCH))
.PHONY: bench-contended

# API docs (Doxygen): common/ and the final stage, zero warnings allowed.
docs:
	@bash tools/deps.sh doxygen
	@mkdir -p build/docs
	FINAL_STAGE=stages/$(LAST) doxygen docs/Doxyfile && echo "docs: build/docs/html/index.html"

# Coursework: `make new-stage FROM=03 NAME=my_tiles` copies stages/03_*/ to stages/03x_my_tiles/,
# which sorts after its source, is built and tested with the others, and is selected by STAGE=03x.
new-stage:
	@bash tools/new_stage.sh "$(FROM)" "$(NAME)"

# Docs that quote the code (--help, line counts, stage pages, links, figures): tools/docs_check.py;
# then every command they quote, run on the tiny models (or `make -n` for long targets):
# tools/docs_commands.py. Checked against the last numbered stage; learner stages (NNx_name) are
# not "the final stage".
DOCS_STAGE := $(lastword $(sort $(notdir $(wildcard stages/[0-9][0-9]_*))))
docs-check: build/$(DOCS_STAGE)/engine
	$(PYTHON) tools/docs_check.py --stage $(DOCS_STAGE)
	$(PYTHON) tools/docs_commands.py --stage $(DOCS_STAGE)
docs-update: build/$(DOCS_STAGE)/engine
	$(PYTHON) tools/docs_check.py --stage $(DOCS_STAGE) --update
.PHONY: new-stage docs-check docs-update

# Decode at a long context (CTX_TOKENS of prompt, then 64 tokens, -c 4096) for ONLY="..." stages on
# MODEL: the stats lines, one run each in turn (stage 21's page, on the V2-Lite-shaped file).
CTX_TOKENS ?= 3900
bench-ctx: $(foreach s,$(BENCH_STAGES),build/$(s)/engine)
	@$(PYTHON) -c "import sys; sys.path.insert(0, 'tools'); import bench; open('build/ctx-prompt.txt', 'w').write(bench.PROMPT_WORDS * ($(CTX_TOKENS) * 115 // 3900))"
	@for s in $(BENCH_STAGES); do echo "$$s: $$(build/$$s/engine -m $(MODEL) -t $(THREADS) --temp 0 -f build/ctx-prompt.txt -n 64 -c 4096 2>&1 >/dev/null | grep stats)"; done
.PHONY: bench-ctx

# Sampling alone (stage 01's full sort against the last stage's partial sort), vocab 102400/152064.
bench-sampling: build/$(firstword $(STAGES))/bench_kernels build/$(DOCS_STAGE)/bench_kernels
	$(PYTHON) tools/bench.py --sampling --stages $(firstword $(STAGES)) $(DOCS_STAGE)
.PHONY: bench-sampling print-flags

# Tokenizer encode speed (MB/s) on a mixed English/Chinese/code text.
bench-tokenizer: build/$(DOCS_STAGE)/bench_kernels
	$(PYTHON) tools/bench.py --tokenizer --stages $(DOCS_STAGE)
.PHONY: bench-tokenizer

# build/quantize IN.gguf OUT.gguf TYPE: llama-quantize's job (tools/quantize.cpp), rows in
# parallel by OpenMP.
build/tools/quantize.o: tools/quantize.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -fopenmp -c $< -o $@
QUANTIZE_OBJ := $(foreach f,gguf gguf_writer quant quant_k quant_mix,build/common/$(f).o)
build/quantize: build/tools/quantize.o $(QUANTIZE_OBJ)
	$(CXX) $(CXXFLAGS) -fopenmp $^ -o $@
quantize: deps build/quantize
.PHONY: quantize

# make ppl: what each quantization type costs the default model (docs/perplexity.md): tiny-kjv-f32
# quantized by build/quantize, scored on the chapters it never saw (tools/kjv.py).
ppl: deps build/quantize build/$(LAST)/engine
	@bash tools/deps.sh bible-kjv
	@mkdir -p build/ppl
	$(PYTHON) tools/kjv.py --validation build/ppl/kjv-validation.txt
	$(PYTHON) tools/ppl_table.py --engine build/$(LAST)/engine --text build/ppl/kjv-validation.txt
.PHONY: ppl

# Read bandwidth with 1..n threads: the roofline for decode (issue: beat llama.cpp at the limit).
build/membench: tools/membench.cpp build/common/timing.o
	$(CXX) $(CXXFLAGS) -fopenmp -ffast-math $^ -o $@
membench: build/membench
	$(PYTHON) tools/bench.py --membench
.PHONY: membench

# Stages with simd.h (08 on): the same suite against the scalar fallback (-DENGINE_NO_SIMD), and
# with every SIMD result checked against it (-DENGINE_CHECK_AGAINST_SCALAR, bit for bit from 09
# on; "avx2" also forces the AVX2 path on an AVX-512 machine). build/NN_name-VARIANT/tests.
define SIMD_VARIANT_RULES
OBJ_$(1)-$(2) := $$(patsubst stages/$(1)/%.cpp,build/$(1)-$(2)/%.o,$$(wildcard stages/$(1)/*.cpp))
build/$(1)-$(2)/%.o: stages/$(1)/%.cpp
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $(3) -Istages/$(1) -c $$< -o $$@
build/$(1)-$(2)/tests: $$(OBJ_$(1)-$(2)) $(TEST_OBJ) build/tests/catch_main.o $(COMMON_OBJ)
	$$(CXX) $$(CXXFLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
endef
$(foreach s,$(SIMD_STAGES),$(eval $(call SIMD_VARIANT_RULES,$(s),scalar,-DENGINE_NO_SIMD)))
$(foreach s,$(SIMD_STAGES),$(eval $(call SIMD_VARIANT_RULES,$(s),check,-DENGINE_CHECK_AGAINST_SCALAR)))
$(foreach s,$(SIMD_STAGES),$(eval $(call SIMD_VARIANT_RULES,$(s),avx2,-mno-avx512f -DENGINE_CHECK_AGAINST_SCALAR)))
$(foreach s,$(AMX_STAGES),$(eval $(call SIMD_VARIANT_RULES,$(s),noamx,-DENGINE_NO_AMX -DENGINE_CHECK_AGAINST_SCALAR)))
test-simd: $(foreach s,$(SIMD_STAGES),build/$(s)-scalar/tests build/$(s)-check/tests build/$(s)-avx2/tests) \
  $(foreach s,$(AMX_STAGES),build/$(s)-noamx/tests)
	@for t in $^; do ./$$t >/dev/null 2>&1 && echo "$$t: passed" || { echo "$$t: FAILED"; exit 1; }; done
.PHONY: test-simd

# linear() alone, one thread, per stage (4096 x 4096, Q4_0 and F32, 1 and 16 tokens).
bench-kernels: $(foreach s,$(STAGES),build/$(s)/bench_kernels)
	$(PYTHON) tools/bench.py --kernels --stages $(STAGES)
.PHONY: bench-kernels

# linear() on batches of 16 to 256 tokens, one thread: stage 25's AMX tiles against stage 24.
AMX_BENCH_STAGES := $(filter 24_% 25_%,$(STAGES))
bench-amx: $(foreach s,$(AMX_BENCH_STAGES),build/$(s)/bench_kernels)
	$(PYTHON) tools/bench.py --amx --stages $(AMX_BENCH_STAGES)
.PHONY: bench-amx

# Decode's linear() over 1 GB of weights against a read-and-sum of the same moments (08 on).
bench-stream: $(foreach s,$(SIMD_STAGES),build/$(s)/bench_kernels)
	$(PYTHON) tools/bench.py --stream --stages $(SIMD_STAGES)
.PHONY: bench-stream

# Stage 03's tile width, measured per width (writes the table of docs/stages/03_blocking.md).
tune-panel: $(COMMON_OBJ)
	bash tools/tune_panel.sh
.PHONY: tune-panel

# Sanitizers: the shared suite and the CLI checks built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer (its "undefined" group includes float-cast-overflow and alignment),
# every report fatal, on the first, a middle and the final stage (SANITIZE_STAGES="..." for
# others). Builds under build/sanitize/; needs Debian's clang and libomp-dev (installed here).
SAN_CXX ?= clang++
SANITIZE_STAGES ?= $(firstword $(STAGES)) $(filter 09_%,$(STAGES)) $(LAST)
SAN_FLAGS := -std=c++20 -O1 -g -march=native -fno-omit-frame-pointer -Wall -Wextra -MMD -MP \
  -Icommon -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_COMMON_OBJ := $(COMMON_SRC:common/%.cpp=build/sanitize/common/%.o)
SAN_TEST_OBJ := $(TEST_SRC:tests/%.cpp=build/sanitize/tests/%.o)
build/sanitize/common/%.o: common/%.cpp
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) -c $< -o $@
build/sanitize/tests/%.o: tests/%.cpp
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) -Itests -DPROJECT_ROOT='"$(CURDIR)"' -c $< -o $@
build/sanitize/tests/catch_main.o: tests/support/catch_main.cc
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) -c $< -o $@
define SANITIZE_RULES
SAN_OBJ_$(1) := $$(patsubst stages/$(1)/%.cpp,build/sanitize/$(1)/%.o,$$(wildcard stages/$(1)/*.cpp))
build/sanitize/$(1)/%.o: stages/$(1)/%.cpp
	@mkdir -p $$(@D)
	$(SAN_CXX) $(SAN_FLAGS) $$(FLAGS_$(1)) -Istages/$(1) -c $$< -o $$@
build/sanitize/$(1)/main.o: common/main.cpp
	@mkdir -p $$(@D)
	$(SAN_CXX) $(SAN_FLAGS) $$(FLAGS_$(1)) -DSTAGE_NAME='"$(1)"' -c $$< -o $$@
build/sanitize/$(1)/engine: $$(SAN_OBJ_$(1)) build/sanitize/$(1)/main.o $(SAN_COMMON_OBJ)
	$(SAN_CXX) $(SAN_FLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
build/sanitize/$(1)/tests: $$(SAN_OBJ_$(1)) $(SAN_TEST_OBJ) build/sanitize/tests/catch_main.o $(SAN_COMMON_OBJ)
	$(SAN_CXX) $(SAN_FLAGS) $$(FLAGS_$(1)) $$^ -o $$@ $(LDLIBS) $$(LIBS_$(1))
endef
$(foreach s,$(SANITIZE_STAGES),$(eval $(call SANITIZE_RULES,$(s))))
test-sanitize: deps
	@bash tools/deps.sh clang libclang-rt-14-dev libomp-dev
	@$(MAKE) --no-print-directory $(foreach s,$(SANITIZE_STAGES),build/sanitize/$(s)/tests build/sanitize/$(s)/engine)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  bash tests/run_all.sh $(SANITIZE_STAGES:%=sanitize/%)
.PHONY: test-sanitize

# The Python module (docs/python.md): make python [STAGE=NN] builds dsengine for Debian's
# /usr/bin/python3 against one stage (default: the last) into build/python/dsengine/, so that
# PYTHONPATH=build/python imports it; `pip install --no-build-isolation .` (setup.py) runs this
# target and installs the same files. Objects are compiled again with -fPIC for the shared library.
PY_DEPS := pybind11-dev python3-dev python3-numpy python3-pytest python3-setuptools python3-wheel \
  python3-pip python3-venv
PY_INCLUDES = -isystem $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PY_STAGE_OBJ := $(patsubst stages/$(SEL)/%.cpp,build/python/$(SEL)/%.o,$(wildcard stages/$(SEL)/*.cpp))
PY_COMMON_OBJ := $(COMMON_SRC:common/%.cpp=build/python/common/%.o)
build/python/common/quant.o build/python/common/quant_k.o: CXXFLAGS += -ffp-contract=off
build/python/common/%.o: common/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -fPIC -c $< -o $@
build/python/$(SEL)/%.o: stages/$(SEL)/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(FLAGS_$(SEL)) -fPIC -Istages/$(SEL) -c $< -o $@
build/python/$(SEL)/core.o: python/core.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(FLAGS_$(SEL)) -fPIC -fvisibility=hidden $(PY_INCLUDES) \
	  -DSTAGE_NAME='"$(SEL)"' -c $< -o $@
build/python/$(SEL)/_core.so: $(PY_STAGE_OBJ) build/python/$(SEL)/core.o $(PY_COMMON_OBJ)
	$(CXX) $(CXXFLAGS) $(FLAGS_$(SEL)) -shared $^ -o $@ $(LDLIBS) $(LIBS_$(SEL))
python-deps:
	@bash tools/deps.sh $(PY_DEPS)
python: python-deps build/python/$(SEL)/_core.so
	@mkdir -p build/python/dsengine
	@# Each file replaced by a rename, not overwritten: a running Python may have _core.so mapped.
	@for f in python/dsengine/*.py python/dsengine/*.pyi python/dsengine/py.typed \
	  build/python/$(SEL)/_core.so; do d=build/python/dsengine/$$(basename $$f); \
	  cmp -s $$f $$d || { cp $$f $$d.tmp && mv -f $$d.tmp $$d; }; done
	@echo "python: build/python/dsengine (stage $(SEL)); PYTHONPATH=build/python $(PYTHON) -c 'import dsengine'"
.PHONY: python python-deps
-include $(wildcard build/python/*/*.d)

# Aggregate decode tokens/s of the server with 1, 2, 4, 8 streams at once (issue: batched decoding
# across requests) on MODEL, optionally beside llama.cpp's llama-server (LLAMA_SERVER=PATH).
SERVER_STAGE := $(lastword $(SERVER_STAGES))
bench-server: build/$(SERVER_STAGE)/server
	$(PYTHON) tools/bench_server.py --server build/$(SERVER_STAGE)/server \
	  --model $(if $(filter command line,$(origin MODEL)),$(MODEL),$(BENCH_MODEL)) --threads $(THREADS) \
	  $(if $(LLAMA_SERVER),--llama-server $(LLAMA_SERVER))
.PHONY: bench-server

# One process x 2 threads against 2 ranks x 1 thread under mpirun (the pipeline stage), on MODEL or
# the 7B-shaped file: tokens/s, memory per rank, bytes sent and time waited per token (stage 24's page).
MPI_STAGE := $(lastword $(foreach s,$(STAGES),$(if $(wildcard stages/$(s)/pipeline.h),$(s))))
MPI_MODEL = $(if $(filter command line,$(origin MODEL)),$(MODEL),build/models/deepseek-7b-q4_0-pure.gguf)
bench-mpi: deps build/$(MPI_STAGE)/engine
	@test -f "$(MPI_MODEL)" || $(MAKE) --no-print-directory model-7b
	$(PYTHON) tools/bench_mpi.py --stage $(MPI_STAGE) --model $(MPI_MODEL) --runs $(RUNS)
.PHONY: bench-mpi

# What the server's tests need (tests/server/run.sh): Node with npm (Debian's nodejs and npm,
# unless a node is there already) and Chromium for the chat page.
server-deps:
	@command -v node >/dev/null && command -v npm >/dev/null || bash tools/deps.sh nodejs npm
	@bash tools/deps.sh chromium
.PHONY: server-deps
