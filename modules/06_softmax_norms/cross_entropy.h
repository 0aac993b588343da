// Contract of 06_softmax_norms/cross_entropy. Read-only: the checker calls exactly this.
#pragma once

// Softmax cross-entropy of each row of logits (rows x vocab, row-major, float32) against its
// class targets[r] (0 <= targets[r] < vocab), fused with the gradient of the mean loss:
//   losses[r]     = log(sum_c exp(logits[r][c])) - logits[r][targets[r]]
//   dlogits[r][c] = (softmax(logits[r])[c] - (c == targets[r] ? 1 : 0)) / rows
// (the trainer's loss is (1 / rows) * sum_r losses[r]; dlogits is its gradient).
// Logits are finite or -inf; -inf marks a masked class (probability 0, dlogit 0), and every
// row's target logit is finite. Logits can be large (|x| up to 1e4), far past where expf
// overflows (88.7). logits, targets (rows ints), losses (rows floats) and dlogits (rows x vocab)
// are device pointers, none aliasing another. Enqueue the work on the default stream and return;
// the checker synchronizes. rows >= 1 and vocab >= 1, any values (not multiples of anything);
// rows * vocab may exceed 2^31, so compute offsets in 64 bits.
void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits,
                   int rows, int vocab);
