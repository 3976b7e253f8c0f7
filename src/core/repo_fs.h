/*
 * repo_fs.h — the model repository on disk: reading model folders, their
 * version folders and config files, and the signatures POLL mode compares.
 */
#ifndef HARK_REPO_FS_H
#define HARK_REPO_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/config.h"

/* The whole file, NUL-terminated (at most 64 MiB); NULL on error. */
char *hark_repo_read_file(const char *path, size_t *len);
bool hark_repo_is_dir(const char *path);
/* A model name names one folder directly under the repository. */
bool hark_repo_name_is_safe(const char *name);
/* Numbered version folders of a model, ascending (caller frees). */
int64_t *hark_repo_list_versions(const char *path, uint32_t *n);
/* Applies the version policy in place; returns how many remain. */
uint32_t hark_repo_apply_policy(const hark_version_policy *p, int64_t *v, uint32_t n);
/* The signature of a model folder: changes when config.pbtxt's content or
 * any file or version folder under it changes (name, size, mtime). */
uint64_t hark_repo_signature(const char *path);
/* Model folders of the repository, sorted (caller frees each and the array). */
char **hark_repo_scan(const char *repo, uint32_t *n);

#endif
