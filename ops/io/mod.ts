/**
 * Loading and saving tensors: .npy and .safetensors.
 *
 * @module
 */
export {};
