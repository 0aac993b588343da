// Contract of 10_inference/speculative_verify. Read-only: the checker calls exactly this.
#pragma once

// The verification step of speculative decoding, for a batch of sequences. A draft model
// proposed gamma tokens per sequence, draft_tokens[b][i], drawing token i from its distribution
// q[b][i]; the target model then scored all of them in one pass: p[b][i] is its distribution
// for position i, i = 0 .. gamma (the last one follows all gamma drafted tokens). Per sequence b:
//  1. Draft token t_i = draft_tokens[b][i] is accepted when uniforms[b][i] < p[b][i][t_i] /
//     q[b][i][t_i], that is with probability min(1, p / q). accepted[b] = n, the number of
//     tokens accepted before the first rejection (0 .. gamma); the positions after a rejection
//     are not tested, whatever their uniforms.
//  2. One more token is drawn with u = residual_uniforms[b]: after a rejection (n < gamma), from
//     the residual r = max(0, p[b][n] - q[b][n]) (elementwise) renormalized to sum 1; when all
//     gamma were accepted, from p[b][gamma] (the bonus token). The token drawn is the first i,
//     in vocabulary order, whose cumulative probability r_0 + ... + r_i exceeds u (after the
//     renormalization).
//  3. out_tokens[b] = {t_0, ..., t_{n-1}, the drawn token, then -1 up to position gamma}.
// The tokens then follow the target's distributions exactly (notes/10_inference.md, section 5).
// - p: [batch][gamma + 1][vocab] float32; q: [batch][gamma][vocab] float32 (one row fewer per
//   sequence than p); each row a probability distribution (non-negative, summing to 1 within
//   float32 rounding), and q[b][i][t_i] > 0 (the draft drew t_i). draft_tokens: [batch][gamma]
//   int in [0, vocab); uniforms: [batch][gamma] and residual_uniforms: [batch], in [0, 1);
//   out_tokens: [batch][gamma + 1] int; accepted: [batch] int. All device pointers, none
//   aliasing another.
// - 1 <= batch <= 256; 1 <= gamma <= 16; 1 <= vocab <= 2^18.
// - Rounding: the checker keeps every uniforms[b][i] at least 1e-4 away from p / q, every
//   residual uniform at least 1e-4 away from a boundary of the cumulative probabilities, and the
//   residual's mass before the renormalization above 1e-3, so sums in float32 or finer (fixed
//   point is fine) give its tokens. Deterministic: the same inputs give the same tokens on every
//   call (the checker compares every timed call's tokens with the first's).
// Enqueue the work on the default stream and return; the checker synchronizes.
void speculative_verify(const float* p, const float* q, const int* draft_tokens,
                        const float* uniforms, const float* residual_uniforms, int* out_tokens,
                        int* accepted, int batch, int gamma, int vocab);
