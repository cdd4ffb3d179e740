/* attnkit: linear-attention entries (DeltaNet, Gated DeltaNet). Included by attnkit.h. */
#ifndef ATTNKIT_LINEAR_H
#define ATTNKIT_LINEAR_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_LINEAR_H */
