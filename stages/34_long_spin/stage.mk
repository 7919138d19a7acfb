# Extra compiler flags for this stage (OpenMP enters at stage 04).
STAGE_CXXFLAGS := -fopenmp
STAGE_SERVER := yes
# OpenMPI where Debian installs it (mpicxx --showme prints the same), known before it is
# installed: tools/deps.sh installs it when make runs.
MPI_DIR := /usr/lib/$(shell $(CXX) -print-multiarch)/openmpi
# MPI's C API only: OMPI_SKIP_MPICXX leaves out its deprecated C++ classes.
STAGE_CXXFLAGS += -isystem $(MPI_DIR)/include -DOMPI_SKIP_MPICXX
STAGE_LDLIBS := -L$(MPI_DIR)/lib -lmpi
# Threads poll libgomp's default 300,000 times at a barrier before they sleep, not the 1000 of
# stages 04-33: on a quiet machine a thread waits longer than 1000 polls at the end of many of
# a decode step's ~120 linear() calls (the other's last 1 MB chunk takes ~70 microseconds),
# sleeps, and must be woken (two threads decoded 1.02-1.17x faster polling long, page 34). On a
# busy machine the thread chooser (stage 29) runs most decode steps on one thread.
STAGE_CXXFLAGS += -DENGINE_SPIN_COUNT='"300000"'
