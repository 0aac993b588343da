// 01_fixture/todo, solution: what every stub of the fixture should have been.
#include "todo.h"

int twice(int x) { return 2 * x; }
