/**
 * Loading and saving tensors: NumPy `.npy` and `.safetensors`, so an op can be checked against
 * numbers saved from PyTorch or NumPy.
 *
 * @module
 */
export { decodeNpy, encodeNpy, loadNpy, type NpyLoadOptions, type NpySaveOptions, saveNpy } from "./npy.ts";
export {
  decodeSafetensors,
  encodeSafetensors,
  loadSafetensors,
  type SafetensorsContents,
  type SafetensorsLoadOptions,
  type SafetensorsSaveOptions,
  saveSafetensors,
} from "./safetensors.ts";
export type { FileSource } from "./raw.ts";
