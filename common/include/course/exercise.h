// Everything a stub or a solution may include from the course: error checks, ceil_div and the
// not-implemented marker. (The harness and the baselines belong to the checkers.)
#pragma once

#include "course/check.h"
#include "course/todo.h"
