# Makefile for facegen: a DCGAN generator for CPUs and CUDA GPUs.
#
#   make                 build everything (build/facegen, tools, tests)
#   make run INPUT=input1 OUTPUT=output1 [MODEL=path]   inputs/input1.txt -> outputs/output1.{txt,bmp}
#   make run [COUNT=64 SEED=1 OUTPUT=samples]           random latents -> outputs/samples.{txt,bmp}
#   make run_parallel INPUT=input1 OUTPUT=output1 NGPUS=4 [MODEL=path] [HOSTS=a,b|hostfile]
#                        the same over NGPUS MPI ranks per node (run_parallel.sh; Slurm-aware)
#                        INPUT: a bare name (inputs/NAME.txt) or a path, with or without .txt;
#                        OUTPUT: a bare name (outputs/NAME) or a path, relative or absolute; without
#                        OUTPUT, named after the input (input2 -> outputs/output2, data/x.txt -> outputs/x)
#   make install PREFIX=/opt/facegen [DESTDIR=...]   bin/facegen, bin/facegen-run-parallel,
#                        bin/facegen-export-model, bin/facegen-make-latents,
#                        share/facegen/models/, share/facegen/slurm/
#   make test            build and run every test this machine can run; ends with a pass/fail line
#   make test-sanitize   the unit, command-line and fault tests again, built with AddressSanitizer and
#                        UndefinedBehaviorSanitizer in build-san/ (same as make test SANITIZE=1)
#   make fuzz            libFuzzer targets (clang) in build/fuzz/; make fuzz-smoke runs each briefly
#   make bench           (GPU machine) build/facegen-bench, then bench/pytorch_reference.py beside it
#   make bench-io        the output writers in MB/s and images/s, on the CPU (BENCH_IO_ARGS=--images N)
#   make bench-png       the PNG encoder by level (MB/s, images/s, bytes per face) and the mosaic by thread
#                        count, on real faces made by the CPU backend (BENCH_PNG_ARGS="--seconds 2")
#   make bench-cpu       the CPU backend beside PyTorch on the CPU and the FMA ceiling (BENCH_CPU_ROUNDS=3)
#   make bench-write     one file's write ceiling against separate files' by writer count and way of writing
#                        (pwrite, the program's mapped windows, whole-file mmap), BENCH_WRITE_DIR=/dev/shm BENCH_WRITE_ARGS="--mib 8192"
#   make bench-latents   the latent text parser in MB/s and images/s per thread count (BENCH_LATENTS_ARGS=--images N)
#   make bench-split     float32 on tensor cores emulated on the CPU: each layer's |error| against float64 in
#                        FFMA, tf32 and 3xTF32 orders (BENCH_SPLIT_ARGS="models/facegen-faces.safetensors 16 2";
#                        MODEL IMAGES ALIGN_BITS [SCHEMES], MODEL a file or random:NGF:K:SEED, SCHEMES
#                        the names of the rows to compute, comma-separated)
#   make bench-scaling   (2-GPU machine) the user's jobs on 1 GPU, 2 GPUs and 2 ranks per GPU against the
#                        file systems' write ceilings (bench/scaling.sh; DEVICE=cpu SCALE=tiny anywhere)
#   make clean
#   make deps            install the Debian packages needed to build and run (apt-get; as root or via sudo)
#   make test-deps       ... and those the tests need (PyTorch for the cross-check)
#   make faces-data      the face training set in .deps/data/faces/ (train/README.md), from npm's DiceBear
#                        and rsvg-convert; make data-deps installs node, npm, librsvg2-bin, numpy and PIL
#
# Knobs: CUDA=0 builds without CUDA (CPU backend only; remembered until CUDA=1); CUDA_ARCH="80 90a" picks the GPU architectures
# (default: 80 90a, one binary for Ampere, Ada and Hopper: sm_86 and sm_89 GPUs run the sm_80 code,
# which compute capability 8.x runs as it is; the wgmma kernels exist only in the 90a code, and the
# program picks them at run time on a compute capability 9.0 GPU; "80 86 89 90a" adds code tuned by
# ptxas for 8.6 and 8.9 at twice the build time; CUDA_ARCH=90a alone builds faster on a Hopper machine); DEBUG=1 builds with -O0 -g; PROFILE=1 adds
# -lineinfo; CPU_ARCH sets -march for the CPU code (default x86-64: the program runs on any x86-64
# CPU, and the CPU backend's kernels pick AVX-512, AVX2 or SSE2 at run time). SANITIZE=1 builds
# into build-san/ with -fsanitize=address,undefined and without CUDA (nvcc cannot build
# AddressSanitizer code). A change
# of knobs rebuilds the objects it affects (build/compile-flags records the last flags).

comma := ,
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CXX       ?= g++
ifeq ($(origin CXX),default)
CXX := g++
endif
# CUDA=0 or CUDA=1 given on the command line is remembered in build/cuda-choice, so that a later
# plain `make run` keeps building what the last explicit choice built instead of rebuilding all with
# nvcc; without a choice, CUDA is built where nvcc is installed.
ifeq ($(origin CUDA),command line)
$(shell mkdir -p build && echo '$(CUDA)' > build/cuda-choice)
endif
CUDA      ?= $(shell cat build/cuda-choice 2>/dev/null || { test -x $(NVCC) && echo 1 || echo 0; })
ifeq ($(SANITIZE),1)
override CUDA := 0
endif
ifeq ($(VALGRIND),1)
override CUDA := 0
endif
CUDA_ARCH ?= 80 90a
CPU_ARCH  ?= x86-64
BUILD     := build
ifeq ($(SANITIZE),1)
BUILD     := build-san
endif
# VALGRIND=1: build-vg/, for tests/suites/valgrind.sh: no CUDA, and no -march beyond x86-64 (valgrind
# cannot decode AVX-512; it hides AVX-512 from the CPU backend, which then runs its AVX2 kernels).
ifeq ($(VALGRIND),1)
BUILD     := build-vg
CPU_ARCH  := x86-64
endif
MAKEFLAGS += -j$(shell nproc)

OPT := -O3
ifeq ($(DEBUG),1)
OPT := -O0 -g
endif

CPPFLAGS := -I. -I/usr/include/stb -MMD -MP
CXXFLAGS := -std=c++17 $(OPT) -march=$(CPU_ARCH) -Wall -Wextra -pthread
# Machine code for each listed architecture, and PTX of the first one (from the same front-end pass)
# for GPUs newer than the list; the wgmma kernels are empty outside the 90a code.
CUDA_ARCH_FIRST := $(firstword $(CUDA_ARCH))
GENCODE   := -gencode arch=compute_$(CUDA_ARCH_FIRST),code=[sm_$(CUDA_ARCH_FIRST),compute_$(CUDA_ARCH_FIRST)] \
             $(foreach a,$(wordlist 2,9,$(CUDA_ARCH)),-gencode arch=compute_$(a),code=sm_$(a))
# --threads 0: nvcc compiles the architectures of one file in parallel (the longest file sets the build time).
NVCCFLAGS := -std=c++17 $(OPT) $(GENCODE) --threads 0 -Xcompiler -Wall,-pthread
ifeq ($(PROFILE),1)
NVCCFLAGS += -lineinfo
endif
# libdeflate compresses each PNG; zlib the bands of a mosaic PNG (png_encoder.hpp).
LDLIBS := -pthread -ldeflate -lz
# The event loops of `facegen serve` (serve/http_server.cpp): Asio, header-only (Debian's libasio-dev),
# nothing to link.
# Any report is fatal (a sanitizer that only prints lets a test pass).
SANITIZER_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ifeq ($(VALGRIND),1)
OPT      := -O1 -g
CXXFLAGS := -std=c++17 $(OPT) -march=$(CPU_ARCH) -Wall -Wextra -pthread
endif
ifeq ($(SANITIZE),1)
OPT      := -O1 -g
# -Wno-maybe-uninitialized: GCC 12 under -fsanitize=address warns falsely inside <regex> (cxxopts).
CXXFLAGS := -std=c++17 $(OPT) -march=$(CPU_ARCH) -Wall -Wextra -Wno-maybe-uninitialized -pthread $(SANITIZER_FLAGS)
LDLIBS   += $(SANITIZER_FLAGS)
endif

# Library sources, lowest layer first: common/ (shapes, precision, errors, threads and the pool, the
# temporary files' list and the stop signals, clock), kernels/, generator/ (the model and its
# backends), latents/ (latents in), formats/ (each output format's bytes), commit/ (what a run may
# replace, the all-or-nothing commit), engine/ (images from the generator to files), run/ (the
# single-process driver, its progress display and run summary); the program's main is apart.
LIB_DIRS := common kernels kernels/cpu generator latents formats commit engine run serve app
LIB_CPP := $(filter-out app/main.cpp generator/cuda_unavailable.cpp,$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cpp)))
ifeq ($(CUDA),1)
LIB_CU  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cu))
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
else
LIB_CU  :=
LIB_CPP += generator/cuda_unavailable.cpp
endif
# MPI: build/facegen also runs as one rank of a parallel job when mpirun or srun starts it (mpi/).
# Found through mpicxx; MPI=0 builds without it (a rank then says it cannot run).
MPICXX ?= mpicxx
MPI    ?= $(shell command -v $(MPICXX) > /dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(MPI),1)
MPI_CPPFLAGS := $(shell $(MPICXX) --showme:compile) -DOMPI_SKIP_MPICXX=1
MPI_LDLIBS   := $(filter-out -lmpi_cxx,$(shell $(MPICXX) --showme:link))
LIB_CPP += $(filter-out mpi/rank_job_unavailable.cpp,$(wildcard mpi/*.cpp))
else
LIB_CPP += mpi/work_split.cpp mpi/launch.cpp mpi/launcher_watch.cpp mpi/rank_job_unavailable.cpp
endif
$(BUILD)/mpi/%.o: CPPFLAGS += $(MPI_CPPFLAGS)

# The CUDA objects first: nvcc's are the longest compiles, so make -j starts them before the short ones.
LIB_OBJ := $(LIB_CU:%.cu=$(BUILD)/%.cu.o) $(LIB_CPP:%.cpp=$(BUILD)/%.o)

# Every object depends on the compiler flags it was built with: $(FLAGS_STAMP) is rewritten only when
# they change (CUDA_ARCH, DEBUG, PROFILE, CPU_ARCH, ...), so such a change rebuilds what it affects
# instead of leaving objects built with the old flags.
FLAGS_STAMP := $(BUILD)/compile-flags
FLAGS_NOW   := $(CXX) $(CPPFLAGS) $(CXXFLAGS) | $(NVCC) $(NVCCFLAGS) | $(MPI_CPPFLAGS)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || printf '%s' '$(FLAGS_NOW)' > $(FLAGS_STAMP); })
endif

# What --version reports: the git commit (with -dirty for uncommitted changes) and what the build has.
# Only common/build_info.o sees these; $(BUILD_INFO_STAMP) changes with them, so a new commit
# recompiles that one file.
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
BUILD_INFO_DEFS := -DFACEGEN_GIT_COMMIT='"$(GIT_COMMIT)"' -DFACEGEN_CPU_ARCH='"$(CPU_ARCH)"' \
                   -DFACEGEN_CUDA_ARCHS='"$(if $(filter 1,$(CUDA)),$(addprefix sm_,$(CUDA_ARCH)))"' -DFACEGEN_MPI=$(MPI)
BUILD_INFO_STAMP := $(BUILD)/build-info
BUILD_INFO_NOW := $(GIT_COMMIT) $(CPU_ARCH) $(CUDA) $(CUDA_ARCH) $(MPI)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell { [ "$$(cat $(BUILD_INFO_STAMP) 2>/dev/null)" = '$(BUILD_INFO_NOW)' ] || printf '%s' '$(BUILD_INFO_NOW)' > $(BUILD_INFO_STAMP); })
endif

TEST_CPP := $(wildcard tests/*.cpp)
TEST_OBJ := $(TEST_CPP:%.cpp=$(BUILD)/%.o)
GPU_TEST_CU := $(wildcard tests/gpu/*.cu)
GPU_TEST_OBJ := $(GPU_TEST_CU:%.cu=$(BUILD)/%.cu.o)

PROGRAM := $(BUILD)/facegen
RANDOM_MODEL_TOOL := $(BUILD)/make-random-network
LATENTS_TOOL := $(BUILD)/make-latents
UNIT_TESTS := $(BUILD)/facegen-tests
GPU_TESTS := $(BUILD)/facegen-gpu-tests
BENCH := $(BUILD)/facegen-bench
BENCH_IO := $(BUILD)/facegen-bench-io
BENCH_CPU := $(BUILD)/facegen-bench-cpu
BENCH_PNG := $(BUILD)/facegen-bench-png
BENCH_LATENTS := $(BUILD)/facegen-bench-latents
BENCH_WRITE := $(BUILD)/facegen-bench-write
BENCH_SPLIT := $(BUILD)/facegen-bench-split
BENCH_OUT := $(BUILD)/bench-run
TEST_MODEL := $(BUILD)/random-network.bin

# libFuzzer targets: the latent parser and the model loader with the sources they need, built by
# clang with the fuzzer, AddressSanitizer and UndefinedBehaviorSanitizer. fuzz-smoke runs each on its
# corpus in fuzz/corpus/ and then for FUZZ_SECONDS of new inputs; FUZZ_SECONDS=600 for a real run.
FUZZ_CXX     ?= clang++-14
FUZZ_SECONDS ?= 25
FUZZ_FLAGS   := -std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -fno-omit-frame-pointer
FUZZ_LIB_SRC := latents/latents.cpp latents/latent_index.cpp latents/text_latents.cpp latents/latent_source.cpp \
                latents/seed_list.cpp latents/npy_latents.cpp latents/input_file.cpp latents/file_system_kind.cpp common/content_hash.cpp common/threads.cpp common/work_pool.cpp common/model_spec.cpp \
                generator/network.cpp generator/safetensors_model.cpp commit/atomic_file.cpp \
                common/temp_registry.cpp common/stop_signals.cpp common/text_format.cpp serve/json.cpp serve/request.cpp \
                serve/oip.cpp serve/http_lines.cpp serve/chunked_body.cpp serve/http_parse.cpp serve/http_message.cpp
FUZZ_TARGETS := $(patsubst fuzz/%.cpp,build/fuzz/%,$(wildcard fuzz/fuzz_*.cpp))
# The library's sources are compiled once into build/fuzz-obj/ and linked into every target (each
# target compiled all of them itself before, the same objects once per target).
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.cpp=build/fuzz-obj/%.o)

MODEL  ?= models/facegen-faces.safetensors
INPUT  ?=
COUNT  ?= 64
SEED   ?= 1
OUTPUT ?=
ARGS   ?=
# INPUT: the first file of INPUT, INPUT.txt, inputs/INPUT, inputs/INPUT.txt. Without INPUT, make run
# draws COUNT random latents with SEED. The output prefix: OUTPUT where it holds a '/' (a path),
# else outputs/OUTPUT; without OUTPUT, the input's name with "input" made "output" (input2 ->
# outputs/output2, faces.txt -> outputs/faces), or outputs/samples for random latents.
INPUT_FILE = $(if $(INPUT),$(shell for f in '$(INPUT)' '$(INPUT).txt' 'inputs/$(INPUT)' 'inputs/$(INPUT).txt'; \
               do [ -f "$$f" ] && { echo "$$f"; break; }; done))
INPUT_STEM = $(patsubst %.txt,%,$(notdir $(INPUT_FILE)))
OUTPUT_NAME = $(if $(OUTPUT),$(patsubst %.txt,%,$(OUTPUT)),$(if $(INPUT),$(patsubst input%,output%,$(INPUT_STEM)),samples))
OUTPUT_PREFIX = $(if $(findstring /,$(OUTPUT_NAME)),$(OUTPUT_NAME),outputs/$(OUTPUT_NAME))
LATENT_ARGS = $(if $(INPUT),--input $(INPUT_FILE),--random $(COUNT) --seed $(SEED))
CHECK_INPUT = $(if $(INPUT),@test -n "$(INPUT_FILE)" || { echo "make: no input file for INPUT=$(INPUT) \
              (looked for $(INPUT), $(INPUT).txt, inputs/$(INPUT), inputs/$(INPUT).txt)" >&2; exit 1; })
NGPUS  ?= 1
HOSTS  ?=

ALL := $(PROGRAM) $(RANDOM_MODEL_TOOL) $(LATENTS_TOOL) $(UNIT_TESTS)
ifeq ($(CUDA),1)
ALL += $(GPU_TESTS) $(BENCH)
endif

.PHONY: all run run_parallel serve install test test-sanitize test-build sanitizer-build valgrind-build fuzz fuzz-smoke bench bench-io bench-png bench-cpu bench-latents bench-split bench-write bench-scaling clean deps test-deps data-deps faces-data
all: $(ALL)

$(BUILD)/libfacegen.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(PROGRAM): $(BUILD)/app/main.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LDLIBS)

$(RANDOM_MODEL_TOOL): $(BUILD)/tools/make_random_network.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(LATENTS_TOOL): $(BUILD)/tools/make_latents.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(UNIT_TESTS): $(TEST_OBJ) $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(GPU_TESTS): $(GPU_TEST_OBJ) $(BUILD)/tests/gpu/test_main.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

# The benchmark links cuBLAS for its baseline and ceilings; nothing else does.
$(BENCH): $(BUILD)/bench/bench.cu.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS) -lcublas

$(BENCH_IO): $(BUILD)/bench/bench_io.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_PNG): $(BUILD)/bench/bench_png.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_CPU): $(BUILD)/bench/bench_cpu.o $(BUILD)/bench/fma_peak.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_LATENTS): $(BUILD)/bench/bench_latents.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_WRITE): $(BUILD)/bench/bench_write.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_SPLIT): $(BUILD)/bench/split_products.o $(BUILD)/libfacegen.a
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/common/build_info.o: CPPFLAGS += $(BUILD_INFO_DEFS)
$(BUILD)/common/build_info.o: $(BUILD_INFO_STAMP)

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -I. -I/usr/include/stb -MMD -MP -c $< -o $@

# The tests' model: seeded random weights, made on demand, never committed.
$(TEST_MODEL): $(RANDOM_MODEL_TOOL)
	$(RANDOM_MODEL_TOOL) --seed 1 --output $@

run: $(PROGRAM)
	$(CHECK_INPUT)
	@mkdir -p $(dir $(OUTPUT_PREFIX))
	$(PROGRAM) --model $(MODEL) $(LATENT_ARGS) --output $(OUTPUT_PREFIX) $(ARGS)

# The HTTP service on PORT (default 8080) of 127.0.0.1 with MODEL; ARGS: more flags of facegen serve.
PORT ?= 8080
serve: $(PROGRAM)
	$(PROGRAM) serve --model $(MODEL) --port $(PORT) $(ARGS)

# NGPUS ranks per node on every node: the Slurm allocation's, HOSTS (a,b or a hostfile), or this machine.
run_parallel: $(PROGRAM)
	$(CHECK_INPUT)
	@mkdir -p $(dir $(OUTPUT_PREFIX))
	./run_parallel.sh $(LATENT_ARGS) --output $(OUTPUT_PREFIX) --ranks-per-node $(NGPUS) \
	  --model $(MODEL) $(if $(HOSTS),--hosts $(HOSTS)) -- $(ARGS)

# The program, its model, the launcher and the sbatch scripts under PREFIX (DESTDIR: a staging root).
# The installed facegen finds PREFIX/share/facegen/models/ beside its own bin/; the installed
# facegen-run-parallel finds facegen in its own directory; the installed sbatch scripts call
# PREFIX/bin/facegen-run-parallel (sbatch runs a copy of a script, which cannot find its neighbours).
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL_SHARE = $(DESTDIR)$(PREFIX)/share/facegen
install: $(PROGRAM) $(LATENTS_TOOL)
	install -d $(DESTDIR)$(PREFIX)/bin $(INSTALL_SHARE)/models $(INSTALL_SHARE)/slurm
	install -m 755 $(PROGRAM) $(DESTDIR)$(PREFIX)/bin/facegen
	install -m 755 run_parallel.sh $(DESTDIR)$(PREFIX)/bin/facegen-run-parallel
	install -m 755 tools/export_model.py $(DESTDIR)$(PREFIX)/bin/facegen-export-model
	install -m 755 $(LATENTS_TOOL) $(DESTDIR)$(PREFIX)/bin/facegen-make-latents
	install -m 644 models/facegen-faces.safetensors models/facegen-fashion.bin $(INSTALL_SHARE)/models/
	for f in slurm/*.sbatch; do \
	  sed 's|\./run_parallel\.sh|$(PREFIX)/bin/facegen-run-parallel|g' "$$f" > $(INSTALL_SHARE)/slurm/$$(basename "$$f") && \
	  chmod 644 $(INSTALL_SHARE)/slurm/$$(basename "$$f") || exit 1; \
	done

# The plain test pass also builds the fuzz targets where clang is installed (tests/suites/fuzz_smoke.sh
# runs them) and build-vg/facegen where valgrind is (tests/suites/valgrind.sh).
PLAIN_PASS   := $(if $(filter 1,$(SANITIZE) $(VALGRIND)),,1)
FUZZ_IN_TEST := $(if $(PLAIN_PASS),$(if $(shell command -v $(FUZZ_CXX) 2>/dev/null),$(FUZZ_TARGETS)))
VG_IN_TEST   := $(if $(PLAIN_PASS),$(if $(shell command -v valgrind 2>/dev/null),valgrind-build))
# What the first suites need is built first; the rest (the GPU tests and the benchmark where CUDA is,
# the fuzz targets, build-vg/, and build-san/ when test-sanitize is asked for too) is built by
# tests/run_all.sh in the background, at the lowest priority, while those suites run, and waited for
# (with a deadline) before the suites that use it. On 2 cores this takes minutes off make test
# test-sanitize: most suites leave a core idle.
TEST_FIRST   := $(PROGRAM) $(RANDOM_MODEL_TOOL) $(LATENTS_TOOL) $(UNIT_TESTS) $(TEST_MODEL)
BACKGROUND_GOALS := $(if $(PLAIN_PASS),$(filter-out $(TEST_FIRST),$(ALL)) $(FUZZ_IN_TEST) $(VG_IN_TEST) \
                    $(if $(filter test-sanitize,$(MAKECMDGOALS)),sanitizer-build))
# make -n test prints the command instead of running the tests (the line names $(MAKE), which -n runs).
DRY_RUN      := $(if $(findstring n,$(firstword -$(MAKEFLAGS))),echo)
test: $(TEST_FIRST)
	@$(DRY_RUN) BUILD=$(BUILD) SANITIZE=$(SANITIZE) \
	  BACKGROUND_BUILD='$(if $(strip $(BACKGROUND_GOALS)),$(MAKE) --no-print-directory $(strip $(BACKGROUND_GOALS)))' \
	  bash tests/run_all.sh

test-build: $(TEST_FIRST)

sanitizer-build:
	@$(MAKE) --no-print-directory SANITIZE=1 test-build

# After the plain pass when both are asked for (make runs goals in parallel otherwise).
test-sanitize: | $(filter test,$(MAKECMDGOALS))
	@$(MAKE) --no-print-directory SANITIZE=1 test

valgrind-build:
	@$(MAKE) --no-print-directory VALGRIND=1 build-vg/facegen

fuzz: $(FUZZ_TARGETS)

# Objects with coverage and the sanitizers but without libFuzzer's main (fuzzer-no-link), each
# rebuilt when a header it includes changes (-MMD); the targets link them with the fuzzer's main.
build/fuzz-obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(subst fuzzer$(comma),fuzzer-no-link$(comma),$(FUZZ_FLAGS)) -MMD -MP -c $< -o $@

$(FUZZ_TARGETS): build/fuzz/%: build/fuzz-obj/fuzz/%.o $(FUZZ_LIB_OBJ)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -o $@ $^

fuzz-smoke: $(FUZZ_TARGETS)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz_run.sh $(FUZZ_TARGETS)

# A benchmark, not a test: numbers, then PyTorch on the same network (BENCH_ARGS=--quick: fewer repetitions;
# TORCH_ARGS e.g. --compile-budget 120).
bench: $(BENCH)
	@mkdir -p $(BENCH_OUT)
	$(BENCH) --out $(BENCH_OUT) $(BENCH_ARGS)
	python3 bench/pytorch_reference.py --dir $(BENCH_OUT) $(TORCH_ARGS)

bench-io: $(BENCH_IO)
	$(BENCH_IO) $(BENCH_IO_ARGS)

# 256 faces from the shipped model on the CPU, made once.
BENCH_FACES := $(BUILD)/bench-faces.npy
$(BENCH_FACES): $(PROGRAM)
	$(PROGRAM) --device cpu --model $(MODEL) --random 256 --seed 1 --formats npy --quiet --output $(basename $@)

bench-png: $(BENCH_PNG) $(BENCH_FACES)
	$(BENCH_PNG) --npy $(BENCH_FACES) $(BENCH_PNG_ARGS)

# BENCH_CPU_ROUNDS interleaved rounds of facegen's CPU backend and PyTorch's CPU forms.
BENCH_CPU_ROUNDS ?= 3
bench-cpu: $(BENCH_CPU)
	bash bench/bench_cpu.sh $(BENCH_CPU) $(BENCH_CPU_ROUNDS)

bench-latents: $(BENCH_LATENTS)
	$(BENCH_LATENTS) $(BENCH_LATENTS_ARGS)

bench-split: $(BENCH_SPLIT)
	$(BENCH_SPLIT) $(BENCH_SPLIT_ARGS)

BENCH_WRITE_DIR ?= /tmp
bench-write: $(BENCH_WRITE)
	$(BENCH_WRITE) $(BENCH_WRITE_DIR) $(BENCH_WRITE_ARGS)

bench-scaling: $(PROGRAM) $(LATENTS_TOOL) $(TEST_MODEL) $(BENCH_WRITE)
	bash bench/scaling.sh

clean:
	rm -rf build build-san build-vg

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RUN_PACKAGES := build-essential make pkg-config libasio-dev libdeflate-dev zlib1g-dev libxxhash-dev libstb-dev libcxxopts-dev nlohmann-json3-dev doctest-dev libfast-float-dev openmpi-bin libopenmpi-dev procps
# libstb-dev: the unit tests decode PNGs with stb_image (nothing is encoded with stb). libxxhash-dev:
# XXH3-128, compiled in (common/content_hash.hpp), for comparing file contents.
# slurm-wlm, munge: the Slurm suites; openssh-server, openssh-client, iproute2, util-linux: the
# virtual cluster (sshd on each node, veth links and a bridge, unshare and nsenter); clang and its
# runtimes: libFuzzer targets; valgrind: the leak and memory check of a whole run; python3-pil: the
# mosaic grid check decodes PNG mosaics; chromium: the service's page in a headless browser.
TEST_PACKAGES := python3 python3-numpy python3-torch python3-pil slurm-wlm munge openssh-server openssh-client iproute2 \
                 util-linux clang-14 libclang-rt-14-dev valgrind chromium
deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(RUN_PACKAGES)

test-deps: deps
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(TEST_PACKAGES)

# The face training set: DiceBear's avataaars (npm, versions pinned) drawn by train/render_faces.mjs,
# rasterised by rsvg-convert and packed by train/make_faces.py into .deps/data/faces/ (about 27 MB,
# 32,768 faces), the same bytes on every run. The npm packages go to .deps/npm/, outside the sources.
DATA_PACKAGES := nodejs npm librsvg2-bin python3 python3-numpy python3-pil
DICEBEAR      := @dicebear/core@9.4.3 @dicebear/collection@9.4.3
PYTHON        ?= python3
data-deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(DATA_PACKAGES)

faces-data:
	mkdir -p .deps/npm
	cd .deps/npm && npm install --no-audit --no-fund --no-save --prefix . $(DICEBEAR)
	$(PYTHON) train/make_faces.py --modules .deps/npm --out .deps/data/faces
	$(PYTHON) train/make_faces.py --check --out .deps/data/faces

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
