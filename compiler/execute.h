// Kept until the runtime includes compiler/deadlock_model.h (runtime/report.cpp,
// tests/runtime/units_test.cpp): the deadlock model's run of a plan moved there.
#pragma once

#include "compiler/deadlock_model.h"
