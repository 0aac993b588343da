#pragma once
#include "course/check.h"
#include "course/cluster.h"
#include "course/launch.h"
