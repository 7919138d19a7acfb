# Extra compiler flags for this stage (OpenMP enters at stage 04).
STAGE_CXXFLAGS := -fopenmp
