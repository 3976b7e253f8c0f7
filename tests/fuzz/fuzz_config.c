/*
 * fuzz_config.c — libFuzzer target for the model config parser: any bytes
 * go through hark_model_config_parse (pbtxt.c, then config.c's schema and
 * checks); a config that parses is also rendered as JSON, then freed.
 * No folder name is passed, so a config of any name gets past the checks.
 */
#include <stdint.h>
#include <stdlib.h>

#include "hark/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hark_model_config *cfg = NULL;
  hark_error *err =
      hark_model_config_parse((const char *)data, size, "fuzz/config.pbtxt", NULL, &cfg);
  if (err) {
    hark_error_free(err);
    return 0;
  }
  free(hark_model_config_to_json(cfg));
  hark_model_config_free(cfg);
  return 0;
}
