// Contract of 10_inference/topk. Read-only: the checker calls exactly this.
#pragma once

// The k largest logits of each row, sorted, with their indices. Per row r:
//   values[r][j], j = 0 .. k-1: the k largest of logits[r][0 .. vocab), largest first;
//   indices[r][j]: the index in the row of values[r][j].
// The order is total, so the output is unique: by value, larger first, with -0.0 just below
// +0.0 (the order of the floats' bits once made unsigned: notes/10_inference.md, section 3);
// equal values by index, the smaller first. Where more tokens tie with the k-th largest value
// than there are places left, the ones with the smallest indices are kept.
// - logits: [rows][vocab] float32, no NaN (infinities allowed); values: [rows][k] float32;
//   indices: [rows][k] int. Device pointers, 4-byte aligned, none aliasing another.
// - 1 <= rows <= 1024; 1 <= vocab <= 2^18; rows * vocab <= 2^24; 1 <= k <= min(vocab, 2048).
// Deterministic (the checker compares every timed call's output with the first's). Enqueue the
// work on the default stream and return; the checker synchronizes.
void topk(const float* logits, float* values, int* indices, int rows, int vocab, int k);
