// 01_fixture/todo: an untouched stub.
#include "course/todo.h"
#include "todo.h"

int twice(int x) {
    // TODO: return twice x.
    COURSE_TODO("twice: return 2 * x, then delete this line");
}
