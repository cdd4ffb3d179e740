/* attnkit: softmax-attention entries (MHA, GQA). Included by attnkit.h. */
#ifndef ATTNKIT_ATTENTION_H
#define ATTNKIT_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_ATTENTION_H */
