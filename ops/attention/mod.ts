/**
 * Softmax attention: MHA and GQA.
 *
 * @module
 */
export {};
