// Contract of 01_fixture/cuda_error: twice(x) returns 2 * x.
#pragma once

int twice(int x);
