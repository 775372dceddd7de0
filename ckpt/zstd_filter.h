/*
 * ckpt/zstd_filter.h — the Zstandard HDF5 filter, registered filter id 32015.
 *
 * One zstd frame per chunk, compression level in cd_values[0] (default 3 when absent), exactly the
 * on-disk convention of the registered filter (https://github.com/HDFGroup/hdf5_plugins, zstd), so
 * files written here read with any other 32015 implementation and vice versa.
 *
 * Memory safety. HDF5 hands the decoder a chunk's bytes from disk and, after the pipeline, copies a
 * whole chunk (chunk dims x type size) out of whatever buffer the decoder returned; it never checks
 * the returned size. So the decoder must produce exactly the chunk's byte size or fail, and it must
 * know that size. It learns it from two sources:
 *   - cd_values, written at dataset creation by the filter's set_local callback:
 *     {level, CKPT_ZSTD_CD_TAG, chunk bytes} (CKPT_ZSTD_CD_NELMTS values). Other 32015
 *     implementations read cd_values[0] only, so such files stay readable everywhere.
 *   - a per-thread expectation set by ckpt_zstd_read from the open dataset's own chunk dims and type
 *     (the numbers HDF5 itself copies by), which also covers files written before set_local existed
 *     (cd_values = {level}) and files whose cd_values were tampered with.
 * When neither is known (another tool reads an old file through the plugin) the decoder falls back to
 * the frame's declared content size, bounded by CKPT_ZSTD_FALLBACK_MAX; docs/FORMAT.md "Compression"
 * says what that fallback can and cannot catch.
 *
 * The same source is built twice: into the checkpoint library (ckpt/zstd_filter.c, registered with
 * H5Zregister by ckpt_zstd_register before a compressed dataset is written or read), and as the HDF5
 * plugin library <build>/plugins/libh5zstd.so (ckpt/plugin/zstd_plugin.c #includes zstd_filter.c and
 * adds the two H5PL entry points), so h5py and h5dump read compressed checkpoints with
 * HDF5_PLUGIN_PATH=<build>/plugins. This file depends on HDF5 and libzstd only (not on core/).
 */
#ifndef CKPT_ZSTD_FILTER_H
#define CKPT_ZSTD_FILTER_H

#include <hdf5.h>
#include <stddef.h>

#define CKPT_ZSTD_FILTER_ID 32015
#define CKPT_ZSTD_DEFAULT_LEVEL 3

/* cd_values written by set_local: [0] level, [1] CKPT_ZSTD_CD_TAG ("MPZ1" read as big-endian ASCII:
 * marks [2] as meshpoint's), [2] the chunk's byte size (chunk dims x type size; HDF5 chunks are
 * below 4 GiB, so it fits). */
#define CKPT_ZSTD_CD_NELMTS 3
#define CKPT_ZSTD_CD_TAG 0x4D505A31u

/* Ceiling on the decoded size of one frame when the chunk size is unknown (fallback only). */
#define CKPT_ZSTD_FALLBACK_MAX ((size_t)256 << 20)

/* The filter class (one element). Its filter callback is the H5Z_func_t contract: returns the valid
 * byte count of the new *buf, or 0 on failure, leaving *buf and *buf_size untouched. */
extern const H5Z_class2_t ckpt_zstd_filter_class[1];

/* Registers the filter with the HDF5 library of this process (idempotent, thread safe).
 * Returns 0 on success, -1 if H5Zregister failed. */
int ckpt_zstd_register(void);

/* The byte size the zstd decoder must produce for a chunk of a dataset with creation properties dcpl
 * and file type `type`: chunk dims x type size, provided the layout is chunked, filter 32015 is in the
 * pipeline once, and every filter ahead of it (in write order) keeps the size (shuffle only).
 * Returns 0 when any of that does not hold or cannot be read (the size is then unknown). */
size_t ckpt_zstd_chunk_bytes(hid_t dcpl, hid_t type);

/* Sets the calling thread's expected decoded chunk size (0: none) and returns the previous one.
 * While it is non-zero the decoder accepts only frames that decode to exactly that many bytes. */
size_t ckpt_zstd_expect(size_t bytes);

/* H5Dread(dset, mem_type, mem_space, file_space, dxpl, buf) with the calling thread's expectation set
 * to dset's chunk size (ckpt_zstd_chunk_bytes) for the duration of the call, then restored. The way
 * the library reads compressed datasets: safe for files written before cd_values carried the size. */
herr_t ckpt_zstd_read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, void *buf);

#endif
