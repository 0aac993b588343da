// The trainer's GPT on the CPU in double precision (cpu_reference.h): every layer's forward and
// backward as loops, the reference the GPU model is checked against.
#include "cpu_reference.h"

#include <cmath>

namespace trainer {

namespace {

using Vec = std::vector<double>;

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int rows, int C) {
    for (int r = 0; r < rows; ++r) {
        const double* x = inp + static_cast<long>(r) * C;
        double m = 0.0, var = 0.0;
        for (int c = 0; c < C; ++c) m += x[c];
        m /= C;
        for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
        const double s = 1.0 / std::sqrt(var / C + 1e-5);
        for (int c = 0; c < C; ++c)
            out[static_cast<long>(r) * C + c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int rows, int C) {
    for (int r = 0; r < rows; ++r) {
        const long o = static_cast<long>(r) * C;
        double g_mean = 0.0, g_xhat_mean = 0.0;
        for (int c = 0; c < C; ++c) {
            const double xhat = (inp[o + c] - mean[r]) * rstd[r];
            const double g = dout[o + c] * weight[c];
            g_mean += g / C;
            g_xhat_mean += g * xhat / C;
        }
        for (int c = 0; c < C; ++c) {
            const double xhat = (inp[o + c] - mean[r]) * rstd[r];
            const double g = dout[o + c] * weight[c];
            dinp[o + c] += rstd[r] * (g - g_mean - xhat * g_xhat_mean);
            dweight[c] += dout[o + c] * xhat;
            dbias[c] += dout[o + c];
        }
    }
}

// out[r][o] = sum_c inp[r][c] * weight[o][c] + bias[o]
void linear_forward(double* out, const double* inp, const double* weight, const double* bias,
                    int rows, int C, int OC) {
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < OC; ++o) {
            double sum = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; ++c)
                sum += inp[static_cast<long>(r) * C + c] * weight[static_cast<long>(o) * C + c];
            out[static_cast<long>(r) * OC + o] = sum;
        }
}

void linear_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, int rows, int C, int OC) {
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < OC; ++o) {
            const double d = dout[static_cast<long>(r) * OC + o];
            if (dbias) dbias[o] += d;
            for (int c = 0; c < C; ++c) {
                dinp[static_cast<long>(r) * C + c] += d * weight[static_cast<long>(o) * C + c];
                dweight[static_cast<long>(o) * C + c] += d * inp[static_cast<long>(r) * C + c];
            }
        }
}

// qkv [B, T, 3C] (q, k, v side by side, heads of HS inside each); att [B, NH, T, T]; out [B, T, C]
void attention_forward(double* out, double* att, const double* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int i = 0; i < T; ++i) {
                const double* q = qkv + (static_cast<long>(b) * T + i) * 3 * C + h * HS;
                double* a = att + ((static_cast<long>(b) * NH + h) * T + i) * T;
                double max = -1e300;
                for (int j = 0; j <= i; ++j) {
                    const double* k = qkv + (static_cast<long>(b) * T + j) * 3 * C + C + h * HS;
                    double dot = 0.0;
                    for (int d = 0; d < HS; ++d) dot += q[d] * k[d];
                    a[j] = dot * scale;
                    max = std::max(max, a[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= i; ++j) sum += a[j] = std::exp(a[j] - max);
                for (int j = 0; j < T; ++j) a[j] = j <= i ? a[j] / sum : 0.0;
                double* y = out + (static_cast<long>(b) * T + i) * C + h * HS;
                for (int d = 0; d < HS; ++d) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; ++j)
                        acc +=
                            a[j] * qkv[(static_cast<long>(b) * T + j) * 3 * C + 2 * C + h * HS + d];
                    y[d] = acc;
                }
            }
}

void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                        int B, int T, int C, int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    Vec datt(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int i = 0; i < T; ++i) {
                const double* a = att + ((static_cast<long>(b) * NH + h) * T + i) * T;
                const double* dy = dout + (static_cast<long>(b) * T + i) * C + h * HS;
                auto at = [&](int t, int which, int d) {
                    return (static_cast<long>(b) * T + t) * 3 * C + which * C + h * HS + d;
                };
                double dot = 0.0;
                for (int j = 0; j <= i; ++j) {
                    datt[j] = 0.0;
                    for (int d = 0; d < HS; ++d) {
                        datt[j] += dy[d] * qkv[at(j, 2, d)];
                        dqkv[at(j, 2, d)] += a[j] * dy[d];
                    }
                    dot += a[j] * datt[j];
                }
                for (int j = 0; j <= i; ++j) {
                    const double dpre = a[j] * (datt[j] - dot) * scale;
                    for (int d = 0; d < HS; ++d) {
                        dqkv[at(i, 0, d)] += dpre * qkv[at(j, 1, d)];
                        dqkv[at(j, 1, d)] += dpre * qkv[at(i, 0, d)];
                    }
                }
            }
}

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)

double gelu(double x) {
    return 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x)));
}
double gelu_slope(double x) {
    const double th = std::tanh(kGeluScale * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) +
           0.5 * x * (1.0 - th * th) * kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace

CpuGpt::CpuGpt(const GptConfig& config, const std::vector<float>& params)
    : config_(config), layout_(param_layout(config)), params_(params.begin(), params.end()) {}

double CpuGpt::forward(const std::vector<int>& inputs, const std::vector<int>& targets, int B,
                       int T) {
    B_ = B;
    T_ = T;
    inputs_ = inputs;
    targets_ = targets;
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
    const long N = static_cast<long>(B) * T;
    auto p = [&](int tensor) { return params_.data() + layout_.offset[tensor]; };
    encoded_.assign(N * C, 0.0);
    ln1_.assign(L * N * C, 0.0);
    ln1_mean_.assign(L * N, 0.0);
    ln1_rstd_.assign(L * N, 0.0);
    qkv_.assign(L * N * 3 * C, 0.0);
    att_.assign(static_cast<long>(L) * B * NH * T * T, 0.0);
    atty_.assign(L * N * C, 0.0);
    residual2_.assign(L * N * C, 0.0);
    ln2_.assign(L * N * C, 0.0);
    ln2_mean_.assign(L * N, 0.0);
    ln2_rstd_.assign(L * N, 0.0);
    fch_.assign(L * N * 4 * C, 0.0);
    fch_gelu_.assign(L * N * 4 * C, 0.0);
    residual3_.assign(L * N * C, 0.0);
    lnf_.assign(N * C, 0.0);
    lnf_mean_.assign(N, 0.0);
    lnf_rstd_.assign(N, 0.0);
    logits_.assign(N * Vp, 0.0);
    probs_.assign(N * Vp, 0.0);

    for (long i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c)
            encoded_[i * C + c] = p(kTokenEmbedding)[static_cast<long>(inputs[i]) * C + c] +
                                  p(kPositionEmbedding)[(i % T) * C + c];
    Vec projection(N * C);
    for (int l = 0; l < L; ++l) {
        const double* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * N * C;
        double* ln1 = ln1_.data() + l * N * C;
        double* qkv = qkv_.data() + l * N * 3 * C;
        double* atty = atty_.data() + l * N * C;
        double* residual2 = residual2_.data() + l * N * C;
        double* ln2 = ln2_.data() + l * N * C;
        double* fch = fch_.data() + l * N * 4 * C;
        double* fch_gelu = fch_gelu_.data() + l * N * 4 * C;
        double* residual3 = residual3_.data() + l * N * C;
        layernorm_forward(ln1, ln1_mean_.data() + l * N, ln1_rstd_.data() + l * N, residual,
                          p(kLn1Weight) + l * C, p(kLn1Bias) + l * C, N, C);
        linear_forward(qkv, ln1, p(kQkvWeight) + static_cast<long>(l) * 3 * C * C,
                       p(kQkvBias) + l * 3 * C, N, C, 3 * C);
        attention_forward(atty, att_.data() + static_cast<long>(l) * B * NH * T * T, qkv, B, T, C,
                          NH);
        linear_forward(projection.data(), atty, p(kAttnProjWeight) + static_cast<long>(l) * C * C,
                       p(kAttnProjBias) + l * C, N, C, C);
        for (long i = 0; i < N * C; ++i) residual2[i] = residual[i] + projection[i];
        layernorm_forward(ln2, ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, residual2,
                          p(kLn2Weight) + l * C, p(kLn2Bias) + l * C, N, C);
        linear_forward(fch, ln2, p(kFcWeight) + static_cast<long>(l) * 4 * C * C,
                       p(kFcBias) + l * 4 * C, N, C, 4 * C);
        for (long i = 0; i < N * 4 * C; ++i) fch_gelu[i] = gelu(fch[i]);
        linear_forward(projection.data(), fch_gelu,
                       p(kFcProjWeight) + static_cast<long>(l) * 4 * C * C, p(kFcProjBias) + l * C,
                       N, 4 * C, C);
        for (long i = 0; i < N * C; ++i) residual3[i] = residual2[i] + projection[i];
    }
    layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(),
                      residual3_.data() + (L - 1) * N * C, p(kLnfWeight), p(kLnfBias), N, C);
    linear_forward(logits_.data(), lnf_.data(), p(kTokenEmbedding), nullptr, N, C, Vp);
    double loss = 0.0;
    for (long i = 0; i < N; ++i) {
        const double* z = logits_.data() + i * Vp;
        double max = -1e300, sum = 0.0;
        for (int v = 0; v < V; ++v) max = std::max(max, z[v]);
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - max);
        for (int v = 0; v < V; ++v) probs_[i * Vp + v] = std::exp(z[v] - max) / sum;
        loss += max + std::log(sum) - z[targets[i]];
    }
    return loss / N;
}

std::vector<double> CpuGpt::backward() {
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
    const int B = B_, T = T_;
    const long N = static_cast<long>(B) * T;
    auto p = [&](int tensor) { return params_.data() + layout_.offset[tensor]; };
    Vec grads(layout_.total, 0.0);
    auto g = [&](int tensor) { return grads.data() + layout_.offset[tensor]; };

    Vec dlogits(N * Vp, 0.0);
    for (long i = 0; i < N; ++i)
        for (int v = 0; v < V; ++v)
            dlogits[i * Vp + v] = (probs_[i * Vp + v] - (v == targets_[i] ? 1.0 : 0.0)) / N;
    Vec dlnf(N * C, 0.0), dresidual(N * C, 0.0);
    linear_backward(dlnf.data(), g(kTokenEmbedding), nullptr, dlogits.data(), lnf_.data(),
                    p(kTokenEmbedding), N, C, Vp);
    layernorm_backward(dresidual.data(), g(kLnfWeight), g(kLnfBias), dlnf.data(),
                       residual3_.data() + (L - 1) * N * C, p(kLnfWeight), lnf_mean_.data(),
                       lnf_rstd_.data(), N, C);
    for (int l = L - 1; l >= 0; --l) {
        const double* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * N * C;
        Vec d4c(N * 4 * C, 0.0), dbtc(N * C, 0.0), dqkv(N * 3 * C, 0.0);
        linear_backward(d4c.data(), g(kFcProjWeight) + static_cast<long>(l) * 4 * C * C,
                        g(kFcProjBias) + l * C, dresidual.data(), fch_gelu_.data() + l * N * 4 * C,
                        p(kFcProjWeight) + static_cast<long>(l) * 4 * C * C, N, 4 * C, C);
        for (long i = 0; i < N * 4 * C; ++i) d4c[i] *= gelu_slope(fch_[l * N * 4 * C + i]);
        linear_backward(dbtc.data(), g(kFcWeight) + static_cast<long>(l) * 4 * C * C,
                        g(kFcBias) + l * 4 * C, d4c.data(), ln2_.data() + l * N * C,
                        p(kFcWeight) + static_cast<long>(l) * 4 * C * C, N, C, 4 * C);
        layernorm_backward(dresidual.data(), g(kLn2Weight) + l * C, g(kLn2Bias) + l * C,
                           dbtc.data(), residual2_.data() + l * N * C, p(kLn2Weight) + l * C,
                           ln2_mean_.data() + l * N, ln2_rstd_.data() + l * N, N, C);
        Vec datty(N * C, 0.0);
        linear_backward(datty.data(), g(kAttnProjWeight) + static_cast<long>(l) * C * C,
                        g(kAttnProjBias) + l * C, dresidual.data(), atty_.data() + l * N * C,
                        p(kAttnProjWeight) + static_cast<long>(l) * C * C, N, C, C);
        attention_backward(dqkv.data(), datty.data(), qkv_.data() + l * N * 3 * C,
                           att_.data() + static_cast<long>(l) * B * NH * T * T, B, T, C, NH);
        Vec dln1(N * C, 0.0);
        linear_backward(dln1.data(), g(kQkvWeight) + static_cast<long>(l) * 3 * C * C,
                        g(kQkvBias) + l * 3 * C, dqkv.data(), ln1_.data() + l * N * C,
                        p(kQkvWeight) + static_cast<long>(l) * 3 * C * C, N, C, 3 * C);
        layernorm_backward(dresidual.data(), g(kLn1Weight) + l * C, g(kLn1Bias) + l * C,
                           dln1.data(), residual, p(kLn1Weight) + l * C, ln1_mean_.data() + l * N,
                           ln1_rstd_.data() + l * N, N, C);
    }
    for (long i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
            g(kTokenEmbedding)[static_cast<long>(inputs_[i]) * C + c] += dresidual[i * C + c];
            g(kPositionEmbedding)[(i % T) * C + c] += dresidual[i * C + c];
        }
    return grads;
}

}  // namespace trainer
