# libFuzzer targets, included by the top-level Makefile (which defines LAST, COMMON_SRC, LDLIBS).
#
#   make fuzz        builds every target with clang's libFuzzer, ASan and UBSan, writes the seed
#                    corpora and runs each target for FUZZ_SECONDS (default 60) seconds, one after
#                    the other; ends non-zero if any target finds something.
#   make fuzz-long   the same for 4 hours per target (FUZZ_SECONDS=14400): 20 hours in all.
#   make fuzz FUZZ_TARGETS="utf8 chat" FUZZ_SECONDS=600    some targets, longer.
#
# Targets (tests/fuzz/fuzz_<name>.cpp): gguf_engine (any file through the GGUF reader, vocabulary,
# chat detection, model loader and the final stage's engine), tokenizer, pretokenizer, utf8, chat.
# Everything lives under build/fuzz/: objects, corpora (corpus/<target>/: seeds from make_seeds.cpp
# plus what the fuzzer keeps), logs/, and reproducers (findings/<target>-crash-...).
# Rerun one finding: build/fuzz/fuzz_<target> build/fuzz/findings/<file>.

FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= gguf_engine tokenizer pretokenizer utf8 chat
FUZZ_DIR := build/fuzz

# -fno-sanitize-recover: UBSan stops at its first report, so libFuzzer saves the input. The
# undefined group includes float-cast-overflow and alignment.
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -march=native -fno-omit-frame-pointer -Wall -Wextra -MMD -MP \
  -Icommon -Itests $(FUZZ_SANITIZE)

# The final stage's flags (its stage.mk; OpenMP from stage 04 on). clang has -fopenmp only with
# libomp installed (Debian: libomp-dev); without it the fuzz copy builds without -fopenmp and the
# pragmas are ignored: one thread, all the target asks for. Evaluated only when a fuzz rule runs.
FUZZ_STAGE_FLAGS = $(FLAGS_$(LAST))
FUZZ_HAS_OPENMP = $(shell echo 'int main() {}' | $(FUZZ_CXX) -fopenmp -x c++ - -o /dev/null \
  2>/dev/null && echo yes)
FUZZ_STAGE_CXXFLAGS = $(if $(FUZZ_HAS_OPENMP),$(FUZZ_STAGE_FLAGS),$(filter-out -fopenmp,$(FUZZ_STAGE_FLAGS)))

FUZZ_COMMON_OBJ := $(COMMON_SRC:common/%.cpp=$(FUZZ_DIR)/common/%.o)
FUZZ_STAGE_OBJ := $(patsubst stages/$(LAST)/%.cpp,$(FUZZ_DIR)/stage/%.o,$(wildcard stages/$(LAST)/*.cpp))
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)

$(FUZZ_DIR)/common/%.o: common/%.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_DIR)/stage/%.o: stages/$(LAST)/%.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) $(FUZZ_STAGE_CXXFLAGS) -fsanitize=fuzzer-no-link -Istages/$(LAST) \
	  -c $< -o $@
$(FUZZ_DIR)/targets/%.o: tests/fuzz/%.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -DPROJECT_ROOT='"$(CURDIR)"' -c $< -o $@
# An archive: each target links only the objects it uses (the engine only into gguf_engine).
$(FUZZ_DIR)/libcommon.a: $(FUZZ_COMMON_OBJ)
	rm -f $@ && ar rcs $@ $^
$(FUZZ_DIR)/fuzz_gguf_engine: $(FUZZ_DIR)/targets/fuzz_gguf_engine.o $(FUZZ_STAGE_OBJ) \
  $(FUZZ_DIR)/libcommon.a
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) $(FUZZ_STAGE_CXXFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS) $(LIBS_$(LAST))
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/targets/fuzz_%.o $(FUZZ_DIR)/libcommon.a
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)
# The seed writer needs no sanitizers: it only writes files.
$(FUZZ_DIR)/make_seeds: tests/fuzz/make_seeds.cpp common/utf8.cpp tests/support/gguf_builder.h
	@mkdir -p $(@D)
	$(FUZZ_CXX) -std=c++20 -O1 -Icommon -Itests -DPROJECT_ROOT='"$(CURDIR)"' $(filter %.cpp,$^) -o $@

fuzz-build: $(FUZZ_BINS) $(FUZZ_DIR)/make_seeds
# clang, its libFuzzer and sanitizer runtimes, and OpenMP for clang, installed first when root.
fuzz:
	@bash tools/deps.sh clang libclang-rt-14-dev libomp-dev
	@$(MAKE) --no-print-directory fuzz-build
	@$(FUZZ_DIR)/make_seeds $(FUZZ_DIR)/corpus
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-long:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=14400
.PHONY: fuzz fuzz-long fuzz-build

-include $(wildcard $(FUZZ_DIR)/*/*.d)
