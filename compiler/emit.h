// Kept until the runtime includes compiler/plan_json.h (runtime/plan_load.cpp, trainer.cpp,
// tests/runtime/units_test.cpp) and compiler/read_file.h (runtime/plan_load.cpp, checkpoint.cpp,
// model_config.cpp), and compiler/cost_model.cpp (read_file.h), csv.cpp (csv.h) and emit_trace.cpp
// (visualization.h) include theirs: the emitters and importers it declared are in those headers
// and in emit_text.h.
#pragma once

#include "compiler/csv.h"
#include "compiler/emit_text.h"
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/visualization.h"
