// Contract of 01_fixture/segfault: twice(x) returns 2 * x.
#pragma once

int twice(int x);
