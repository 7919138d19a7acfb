// matmul.h: what the forward pass needs from matmul.cpp besides linear() (declared in engine.h).
#pragma once

#include "engine.h"

/// Grows scratch so that linear(w, ...) will not allocate (throws std::bad_alloc if it cannot).
/// The engine calls it for every weight at creation, so running out of memory shows up there.
void reserve_linear_scratch(const Weight& w, MatmulScratch& scratch);
