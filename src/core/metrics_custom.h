/* Backend-defined metrics (metrics_custom.c): the exposition's part. */
#ifndef HARK_CORE_METRICS_CUSTOM_H
#define HARK_CORE_METRICS_CUSTOM_H

/* Every backend metric in Prometheus text, one HELP/TYPE per name; the
 * caller frees it. NULL when out of memory. */
char *hark_metrics_custom_render(void);

#endif
