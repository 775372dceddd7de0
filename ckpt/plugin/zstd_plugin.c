/*
 * ckpt/plugin/zstd_plugin.c — the zstd filter (id 32015) as a dynamically loaded HDF5 plugin.
 *
 * Built as <build>/plugins/libh5zstd.so. Point HDF5 at it with HDF5_PLUGIN_PATH=<build>/plugins and
 * h5py, h5dump, HDFView read checkpoints saved with compression. The filter code is the library's own
 * (ckpt/zstd_filter.c, included here so both builds share one source); this file only adds the two
 * entry points HDF5's plugin loader looks up.
 *
 * Through the plugin the decoder learns a chunk's size from cd_values alone (no ckpt_zstd_read sets the
 * per-thread expectation in another program): datasets created through it (h5py, h5repack) get the size
 * recorded by the filter's set_local like meshpoint's own; files written before that decode under the
 * bounded fallback described in docs/FORMAT.md "Compression".
 */
#include "ckpt/zstd_filter.c"
#include <H5PLextern.h>

/* Tells the loader this plugin is a filter. */
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }

/* The filter class the loader registers. */
const void *H5PLget_plugin_info(void) { return ckpt_zstd_filter_class; }
