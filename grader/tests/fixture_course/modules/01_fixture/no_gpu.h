// Contract of 01_fixture/no_gpu: twice(x) returns 2 * x.
#pragma once

int twice(int x);
