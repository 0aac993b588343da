// 01_fixture/syntax_error: the TODO half written (COURSE_TODO deleted); it does not compile.
#include "syntax_error.h"

int twice(int x) { return 2 * x }
