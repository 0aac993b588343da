// Contract of 01_fixture/syntax_error: twice(x) returns 2 * x.
#pragma once

int twice(int x);
