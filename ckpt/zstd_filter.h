/*
 * ckpt/zstd_filter.h — the Zstandard HDF5 filter, registered filter id 32015.
 *
 * One zstd frame per chunk, compression level in cd_values[0] (default 3 when absent), exactly the
 * on-disk convention of the registered filter (https://github.com/HDFGroup/hdf5_plugins, zstd), so
 * files written here read with any other 32015 implementation and vice versa.
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

#define CKPT_ZSTD_FILTER_ID 32015
#define CKPT_ZSTD_DEFAULT_LEVEL 3

/* The filter class (one element). */
extern const H5Z_class2_t ckpt_zstd_filter_class[1];

/* Registers the filter with the HDF5 library of this process (idempotent, thread safe).
 * Returns 0 on success, -1 if H5Zregister failed. */
int ckpt_zstd_register(void);

#endif
