// The two backends of the sparse-attention entries (cpu.cpp, cuda.cu): the CPU runs the planner's tiled
// blocks phase by phase or every item of rows.h in double; CUDA launches the planner's registry row.
#pragma once

#include "sparse/problem.h"

namespace ak::sparse {

namespace cpu {
void nsa_compression(const NsaCompression& p);
void nsa_topk(const NsaTopk& p);
void nsa_selection(const NsaSelection& p);
void dsa_decode(const DsaDecode& p);
void indexer(const Indexer& p);
}  // namespace cpu

namespace cuda {
void nsa_compression(const NsaCompression& p, int device);
void nsa_topk(const NsaTopk& p, int device);
void nsa_selection(const NsaSelection& p, int device);
void dsa_decode(const DsaDecode& p, int device);
void indexer(const Indexer& p, int device);
}  // namespace cuda

}  // namespace ak::sparse
