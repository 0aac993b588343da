// 01_fixture/passes: a learner who filled the TODO and deleted the COURSE_TODO line; passes.
#include "passes.h"

int twice(int x) { return 2 * x; }
