// Everything a stub or a solution may include from the course: error checks, ceil_div, the
// not-implemented marker, launch helpers and thread block clusters. (The harness and the
// baselines belong to the checkers.)
#pragma once

#include "course/check.h"
#include "course/cluster.h"
#include "course/launch.h"
#include "course/todo.h"
