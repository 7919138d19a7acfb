# Extra compiler flags for this stage (OpenMP enters at stage 04).
STAGE_CXXFLAGS := -fopenmp
STAGE_SERVER := yes
# OpenMPI where Debian installs it (mpicxx --showme prints the same), known before it is
# installed: tools/deps.sh installs it when make runs.
MPI_DIR := /usr/lib/$(shell $(CXX) -print-multiarch)/openmpi
# MPI's C API only: OMPI_SKIP_MPICXX leaves out its deprecated C++ classes.
STAGE_CXXFLAGS += -isystem $(MPI_DIR)/include -DOMPI_SKIP_MPICXX
STAGE_LDLIBS := -L$(MPI_DIR)/lib -lmpi
