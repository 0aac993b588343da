// Contract of 01_fixture/todo: twice(x) returns 2 * x.
#pragma once

int twice(int x);
