// matmul.h: linear() is declared in engine.h; stage 05's fused kernels need no other entry point.
#pragma once

#include "engine.h"
