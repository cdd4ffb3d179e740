/**
 * Linear attention: DeltaNet and Gated DeltaNet.
 *
 * @module
 */
export {};
