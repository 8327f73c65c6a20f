// A cuBLAS matrix product (single precision, 1024^3) checked against the CPU on sampled entries.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "uvmpool_probe.h"

int main() {
  const int n = 1024;
  std::vector<float> A(n * n), B(n * n), C(n * n);
  for (int i = 0; i < n * n; ++i) {
    A[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
    B[i] = static_cast<float>((i * 53) % 97) / 97.0f - 0.5f;
  }
  float *dA, *dB, *dC;
  if (cudaMalloc(&dA, n * n * 4) || cudaMalloc(&dB, n * n * 4) || cudaMalloc(&dC, n * n * 4)) return 1;
  cudaMemcpy(dA, A.data(), n * n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), n * n * 4, cudaMemcpyHostToDevice);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1, zero = 0;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n) != CUBLAS_STATUS_SUCCESS) return 1;
  cudaMemcpy(C.data(), dC, n * n * 4, cudaMemcpyDeviceToHost);
  for (int s = 0; s < 64; ++s) {
    const int row = (s * 131) % n, col = (s * 71) % n;
    double ref = 0;
    for (int k = 0; k < n; ++k) ref += double(A[k * n + row]) * B[col * n + k];
    if (std::fabs(ref - C[col * n + row]) > 1e-2 * (1 + std::fabs(ref))) {
      std::fprintf(stderr, "C(%d,%d) = %f, expected %f\n", row, col, C[col * n + row], ref);
      return 1;
    }
  }
  cublasDestroy(h);
  cudaFree(dA); cudaFree(dB); cudaFree(dC);
  std::printf("cublas matmul: ok\n");
  uvmpool_probe_print("cublas");
  return 0;
}
