/** The package version; the native library reports the same string from `ak_version()`. */
export const VERSION = "0.1.0";
