# medha: one plain top-level build.
#
#   make                 build every program into bin/
#   make test            build and run every test; ends with
#                        "N passed, N failed, N skipped" (tests/README)
#   make unit            build and run the unit tests, but the slow ones
#   make contrib         contrib's programs into build/contrib/ (part of make)
#   make asan            the same tests under AddressSanitizer + UBSan
#   make ARCH=x86-64-v2  a build that runs on any x86-64-v2 machine
#                        (default: native, the machine it is built on)
#   make demo            the main job: a live replica on SmolLM2 answers a
#                        trace; then a simulated hour, report and plot
#   make bench           simulator speed benchmark
#   make bench-cpu       the CPU backend against llama.cpp: by weight type,
#                        and at depths of 0 to 128K tokens
#   make bench-live      the live replica on SmolLM2: continuous batching,
#                        and one request against medha-worker -p
#   make bench-sched     scheduler decision time, dispatch round trips
#   make bench-predictor medha-prof profiles the cpu backend, then the
#                        profile predicts 200 random batches: the error
#   make test-gpu        the GPU tests (tests/gpu/*_test.c) alone; fails
#                        without a CUDA device (make test skips them)
#   make bench-gpu       the GPU benchmarks beside PyTorch's and Hugging
#                        Face's
#   make gpu-pack        what contrib/gpu-check.sh needs on a lent GPU
#                        machine: the programs stripped, the libraries it
#                        lacks, the random test model (build/gpu-pack,
#                        build/gpu-libs; doc/DESIGN.md, section 13)
#   make simt            the SIMT emulator (tests/gpu/simt) and its test
#                        program, the kernels of kernels/ compiled as host
#                        C++ by g++ (needs CUDA's headers, not nvcc):
#                        build/tests/gpu/simt/simt_test (SIMT_SAN=1: with
#                        ASan and UBSan, in .../simt-san; SIMT_KERNELS=DIR
#                        and SIMT_OUT=DIR build another copy of kernels/,
#                        as tests/gpu/simt/mutants.sh does)
#   make cuda-mock       the cuda backend on host stand-ins (tests/gpu/mock,
#                        CUDA=1): build/tests/gpu/mock/ gets
#                        backend_cuda_test, libcublasLt.so.13, libnccl.so.2
#                        and bin/medha-worker, bin/medha-prof (run them
#                        with LD_LIBRARY_PATH=build/tests/gpu/mock)
#   make install PREFIX=/usr/local
#
# CUDA parts (kernels/*.cu) build only where nvcc is found.

SHELL   := /bin/bash
.SHELLFLAGS := -o pipefail -c
PREFIX  ?= /usr/local
MANDIR  ?= $(PREFIX)/share/man
BUILD   ?= build
BIN     ?= bin
CC      ?= cc
OPT     ?= -O2
SAN     ?=
ARCH    ?= native
CFLAGS  ?= $(OPT) -g
override CFLAGS += $(SAN) -std=c11 -D_GNU_SOURCE -march=$(ARCH) -Wall -Wextra -iquote libcore
# every compile also writes which headers it read, as a .d file beside
# its output (included at the end); -MP keeps a header that went away
# from stopping the build
DEPFLAGS = -MMD -MP
override LDFLAGS += $(SAN)
# the libraries every program links (the GPU test harness too); the
# cuda build adds the kernels and CUDA's runtime below
BASE_LDLIBS = -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm
LDLIBS  += $(BASE_LDLIBS)
TESTLIBS = -lcmocka

NVCC    ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# CUDA=0 builds without the cuda backend even where nvcc is found
CUDA    ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# machine code for Ampere (sm_80) and Hopper (sm_90a, with its wgmma),
# and PTX for later chips; the fat binary compressed (zstd: a seventh of
# its size, so that the programs travel to a lent GPU, contrib/gpu-pack.sh;
# CUDA 13's runtime needs a driver that reads it anyway)
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo --compress-mode=size \
    -gencode=arch=compute_80,code=sm_80 \
    -gencode=arch=compute_90a,code=sm_90a \
    -gencode=arch=compute_90,code=compute_90

PROGS     = medha-prof medha-router medha-sched medha-trace medha-worker
LIB_SRCS  = $(wildcard libcore/*.c libcore/*/*.c libcore/*/*/*.c)
# the cuda backend (libcore/cuda/*.c, its adapter libcore/engine/
# backend_cuda.c, kernels/*.cu) is built only with CUDA=1: then every
# program links the kernels and CUDA's static runtime (a program that
# never opens the cuda backend starts as fast as before and needs no
# CUDA library at run time; the backend loads cuBLASLt and NCCL with
# dlopen when it opens)
ifneq ($(CUDA),1)
LIB_SRCS := $(filter-out $(wildcard libcore/engine/*cuda*.c libcore/cuda/*.c),$(LIB_SRCS))
endif
LIB_OBJS  = $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       = $(BUILD)/libmedha.a
PROG_OBJS = $(patsubst %.c,$(BUILD)/%.o,$(foreach p,$(PROGS),$(wildcard cmd/$(p)/*.c)))
TEST_SRCS = $(wildcard tests/*_test.c)
TESTS     = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
# GPU tests and benchmarks (tests/gpu/*_test.c, *_bench.c), built only
# with CUDA=1; a test exits 77 ("skip: no CUDA device") where there is
# no GPU, which tests/run.sh counts as a skip
ifeq ($(CUDA),1)
GPU_TESTS   = $(patsubst %.c,$(BUILD)/%,$(wildcard tests/gpu/*_test.c))
GPU_BENCHES = $(patsubst %.c,$(BUILD)/%,$(wildcard tests/gpu/*_bench.c))
endif
# programs the shell tests run, tests/tools/*.c (topo_dist: tests/sh/topo.sh;
# lookahead_sched: tests/sh/lookahead.sh; slow_sched:
# tests/sh/replay-burst.sh; long_prompt: tests/sh/router-long-prompt.sh;
# netfault: contrib/netns-hosts.sh and tests/sh/hosts.sh),
# built into $(BUILD)/tests/tools
TEST_TOOLS = $(patsubst %.c,$(BUILD)/%,$(wildcard tests/tools/*.c))
# contrib's programs: contrib/*.c but the libFuzzer targets (fuzz-*.c,
# which contrib/fuzz-*.sh build with clang)
CONTRIB   = $(patsubst %.c,$(BUILD)/%,$(filter-out contrib/fuzz-%.c,$(wildcard contrib/*.c)))
CU_SRCS   = $(wildcard kernels/*.cu)
CU_OBJS   = $(CU_SRCS:%.cu=$(BUILD)/%.o)
CU_LIB    = $(BUILD)/libmedha-kernels.a
ifeq ($(CUDA),1)
override CFLAGS += -DMEDHA_CUDA -isystem $(CUDA_HOME)/include -iquote kernels
LIB_DEPS  = $(CU_LIB)
LDLIBS   += $(CU_LIB) -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++ -lm
endif
MAN1      = $(wildcard man/*.1)
MAN5      = $(wildcard man/*.5)
MAN7      = $(wildcard man/*.7)

.PHONY: all test unit asan bench bench-cpu bench-live bench-sched bench-predictor \
    demo install clean \
    contrib kernels format test-gpu bench-gpu gpu-pack simt cuda-mock
all: $(PROGS:%=$(BIN)/%) contrib kernels

# A target whose .d is missing (built before there were any, or the .d
# removed) is built again, so that its headers are known: each .d is a
# prerequisite, a target that is made up to date by nothing when absent.
DEPS = $(patsubst %.o,%.d,$(LIB_OBJS) $(PROG_OBJS)) \
    $(TESTS:=.d) $(TEST_TOOLS:=.d) $(CONTRIB:=.d) $(GPU_TESTS:=.d) \
    $(GPU_BENCHES:=.d)
$(DEPS):
$(BUILD)/%.d: ;
.PRECIOUS: $(BUILD)/%.d

$(BUILD)/%.o: %.c $(BUILD)/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# one directory per program under cmd/, each linked with what they all
# share (cmd/common.c)
define prog_rule
$(BIN)/$(1): $(patsubst %.c,$(BUILD)/%.o,$(wildcard cmd/$(1)/*.c) cmd/common.c) $(LIB) $(LIB_DEPS)
	@mkdir -p $(BIN)
	$$(CC) $$(CFLAGS) $$(LDFLAGS) -o $$@ $$(filter %.o %.a,$$(filter-out $$(LIB_DEPS),$$^)) $$(LDLIBS)
endef
$(foreach p,$(PROGS),$(eval $(call prog_rule,$(p))))

# a test, or a tool (tests/tools/X.c: $(BUILD)/tests/tools/X), in one step
$(BUILD)/tests/%: tests/%.c $(LIB) $(LIB_DEPS) $(BUILD)/tests/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d -Itests $(LDFLAGS) -o $@ $< $(LIB) \
	    $(TESTLIBS) $(LDLIBS)

contrib: $(CONTRIB)

$(BUILD)/contrib/%: contrib/%.c $(LIB) $(LIB_DEPS) $(BUILD)/contrib/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

ifeq ($(CUDA),1)
kernels: $(CU_LIB)
else
kernels:
	@echo "kernels: nvcc not found (or CUDA=0): the cuda backend is not built"
endif

$(BUILD)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.cuh) kernels/kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Ikernels -c -o $@ $<

$(CU_LIB): $(CU_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# ---- the GPU test harness, built and run without a GPU ----

# The SIMT emulator: the kernels' own sources compiled as host C++ with
# tests/gpu/simt/simt.h force-included (it defines kernels/common.cuh's
# launch and shared-memory macros the emulator's way), simt.cc, and
# simt_test.c (kernels_test.c's cases) linked with libmedha.a. sample.cu
# is not emulated. CUDA's headers only: nvcc is not needed.
SIMT_CUDA    = $(or $(CUDA_HOME),/usr/local/cuda)
SIMT_KERNELS ?= kernels
SIMT_SAN     ?= 0
SIMT_ASAN    = -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined
SIMT_SANFL   = $(if $(filter 1,$(SIMT_SAN)),$(SIMT_ASAN))
SIMT_OUT     ?= $(BUILD)/tests/gpu/simt$(if $(filter 1,$(SIMT_SAN)),-san)
SIMT_NAMES   = attn attn_mma kv norm rope merge add embed swiglu moe
SIMT_OBJS    = $(SIMT_NAMES:%=$(SIMT_OUT)/%.o)
SIMT_CXX     = g++ -std=c++17 -O1 -g -w $(SIMT_SANFL) -DMEDHA_SIMT \
    -isystem $(SIMT_CUDA)/include -I$(SIMT_KERNELS) \
    -include tests/gpu/simt/simt.h
simt: $(SIMT_OUT)/simt_test

$(SIMT_OUT)/%.o: $(SIMT_KERNELS)/%.cu $(wildcard $(SIMT_KERNELS)/*.cuh) \
    $(SIMT_KERNELS)/kernels.h tests/gpu/simt/simt.h
	@mkdir -p $(dir $@)
	$(SIMT_CXX) $(DEPFLAGS) -x c++ -c -o $@ $<

$(SIMT_OUT)/simt.o: tests/gpu/simt/simt.cc tests/gpu/simt/simt.h
	@mkdir -p $(dir $@)
	g++ -std=c++17 -O2 -g -Wall $(SIMT_SANFL) -isystem $(SIMT_CUDA)/include \
	    -I$(SIMT_KERNELS) $(DEPFLAGS) -c -o $@ $<

$(SIMT_OUT)/simt_test.o: tests/gpu/simt/simt_test.c tests/gpu/kernels_test.c \
    $(SIMT_KERNELS)/kernels.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g $(SIMT_SANFL) -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA \
	    -isystem $(SIMT_CUDA)/include -iquote libcore -iquote $(SIMT_KERNELS) \
	    -Itests $(DEPFLAGS) -c -o $@ $<

$(SIMT_OUT)/simt_test: $(SIMT_OUT)/simt_test.o $(SIMT_OBJS) $(SIMT_OUT)/simt.o $(LIB)
	g++ $(SIMT_SANFL) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(BASE_LDLIBS)

# The stand-ins (tests/gpu/mock): the CUDA runtime and kernels/ as plain
# C (cudart_mock.c, linked into each program), cuBLASLt and NCCL as the
# shared libraries the backend dlopens; backend_cuda_test and the two
# programs the live test drives, each linked by MOCK_LINK from the
# objects the Makefile built (libmedha.a with the cuda room; nothing of
# CUDA's runtime or the kernels' library).
MOCK_OUT   = $(BUILD)/tests/gpu/mock
MOCK_FLAGS = -O2 -g -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA \
    -isystem $(CUDA_HOME)/include -iquote libcore -iquote kernels -Itests
MOCK_LINK  = $(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -rdynamic $(LIB) \
    $(TESTLIBS) $(BASE_LDLIBS) -ldl
MOCK_PROGS = $(MOCK_OUT)/backend_cuda_test $(MOCK_OUT)/libcublasLt.so.13 \
    $(MOCK_OUT)/libnccl.so.2 $(MOCK_OUT)/bin/medha-worker \
    $(MOCK_OUT)/bin/medha-prof
ifeq ($(CUDA),1)
cuda-mock: $(MOCK_PROGS)
else
cuda-mock:
	@echo "cuda-mock: nvcc not found (or CUDA=0): no cuda backend to stand in for"; false
endif

$(MOCK_OUT)/%.o: tests/gpu/mock/%.c
	@mkdir -p $(dir $@)
	$(CC) $(MOCK_FLAGS) $(DEPFLAGS) -fPIC -c -o $@ $<

$(MOCK_OUT)/backend_cuda_test.o: tests/gpu/backend_cuda_test.c
	@mkdir -p $(dir $@)
	$(CC) $(MOCK_FLAGS) $(DEPFLAGS) -c -o $@ $<

$(MOCK_OUT)/backend_cuda_test: $(MOCK_OUT)/backend_cuda_test.o \
    $(MOCK_OUT)/cudart_mock.o $(LIB)
	$(MOCK_LINK)

$(foreach p,medha-worker medha-prof,$(eval $(MOCK_OUT)/bin/$(p): \
    $(patsubst %.c,$(BUILD)/%.o,$(wildcard cmd/$(p)/*.c) cmd/common.c) \
    $(MOCK_OUT)/cudart_mock.o $(LIB)))
$(MOCK_OUT)/bin/%:
	@mkdir -p $(dir $@)
	$(MOCK_LINK)

$(MOCK_OUT)/libcublasLt.so.13: $(MOCK_OUT)/cublaslt_mock.o $(LIB)
	$(CC) $(LDFLAGS) -shared -o $@ $< $(LIB)

$(MOCK_OUT)/libnccl.so.2: $(MOCK_OUT)/nccl_mock.o
	$(CC) $(LDFLAGS) -shared -o $@ $< -lrt

# the references first (once; the tests that need them skip without)
test: all $(TESTS) $(TEST_TOOLS) $(GPU_TESTS) $(GPU_BENCHES)
	-@sh contrib/fetch-refs.sh >/dev/null
	@MEDHA_CUDA=$(CUDA) sh tests/run.sh $(BUILD)/tests $(BIN)

# the GPU tests alone, their measured errors shown; no device is a failure
ifeq ($(CUDA),1)
test-gpu: $(GPU_TESTS)
	@sh tests/run.sh --gpu $(BUILD)/tests $(BIN)
else
test-gpu:
	@echo "test-gpu: nvcc not found (or CUDA=0): no GPU test is built"; false
endif

# the GPU benchmarks (contrib/bench-gpu.sh): medha's attention kernels
# beside PyTorch's SDPA, and a random Llama-3-8B end to end beside Hugging
# Face transformers; with GPU_QUICK=1 the short versions
bench-gpu: all $(GPU_BENCHES)
	@BUILD=$(BUILD) sh contrib/bench-gpu.sh $(BIN)

gpu-pack: all $(GPU_TESTS) $(GPU_BENCHES)
	@sh contrib/gpu-pack.sh $(BIN) $(BUILD)

# the programs too: hostile_test drives medha-sched and medha-worker
unit: $(PROGS:%=$(BIN)/%) $(TESTS)
	@sh tests/run.sh --unit $(BUILD)/tests $(BIN)

asan:
	$(MAKE) BUILD=build/asan BIN=build/asan/bin OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    test

# the main job: a live replica (medha-sched and a cpu medha-worker on
# SmolLM2-135M-Instruct) answers a short generated trace of real text
# prompts, with the answers' first lines and a report; then one simulated
# hour of the paper's workload (report and plot)
demo: all
	sh contrib/fetch-refs.sh model
	bash examples/demo-live.sh $(BIN)
	$(BIN)/medha-trace gen -q 0.75 -l 0.05 -t 3600 -s 1 | \
	$(BIN)/medha-sched --sim a100 -m llama3-8b --tp 8 --spp 2 \
	    --policy medha --chunk adaptive | \
	$(BIN)/medha-trace report --plot medha-report.png \
	    --title 'medha (adaptive chunks), 0.75 QPS, Llama-3 8B on 16 A100s (tp 8, spp 2)'
	@echo "plot: medha-report.png; live records: live-records.jsonl"

bench: all
	@sh contrib/bench-sim.sh $(BIN)

bench-live: all
	@BUILD=$(BUILD) sh contrib/bench-live.sh $(BIN)

bench-cpu: $(LIB)
	@sh contrib/bench-cpu.sh

bench-sched: $(LIB)
	@BUILD=$(BUILD) sh contrib/bench-sched.sh

bench-predictor: all
	@sh contrib/bench-predictor.sh $(BIN)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1 \
	    $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 755 $(PROGS:%=$(BIN)/%) $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(MAN5) $(DESTDIR)$(MANDIR)/man5
	$(if $(MAN7),install -m 644 $(MAN7) $(DESTDIR)$(MANDIR)/man7)

format:
	clang-format -i libcore/*.[ch] libcore/*/*.[ch] libcore/*/*/*.[ch] cmd/*.[ch] cmd/*/*.[ch] tests/*.c

clean:
	rm -rf build bin

# the header dependencies the compiles wrote (none before the first build)
-include $(wildcard $(BUILD)/libcore/*.d $(BUILD)/libcore/*/*.d \
    $(BUILD)/libcore/*/*/*.d \
    $(BUILD)/cmd/*.d $(BUILD)/cmd/*/*.d $(BUILD)/tests/*.d \
    $(BUILD)/tests/tools/*.d $(BUILD)/tests/gpu/*.d $(BUILD)/contrib/*.d \
    $(MOCK_OUT)/*.d $(SIMT_OUT)/*.d)
