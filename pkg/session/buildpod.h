/* A build Job's pod, watched directly: the builder's exit is known at the pod's Succeeded, a
 * second or more before the Job says Complete (the job controller batches pod events for
 * SyncJobBatchPeriod, 1 s, before it writes the Job's status). kaniko exits 0 only after its
 * push, so a Succeeded pod of the Job means the image is in the registry. */
#ifndef TELO_SESSION_BUILDPOD_H
#define TELO_SESSION_BUILDPOD_H

#include <json.h>

struct ctrl_informer;

/* The labels the job controller puts on a Job's pods: the Job's uid (both spellings). */
#define BUILD_POD_LABEL_JOB_UID        "batch.kubernetes.io/controller-uid"
#define BUILD_POD_LABEL_JOB_UID_LEGACY "controller-uid"
/* The build pods' cache index: the telo.run/tag label. */
#define BUILD_POD_INDEX_TAG "buildTag"

/* Whether pod (as cached: labels and status) is a pod of the Job whose uid is job_uid and has
 * Succeeded. Pure; NULLs and foreign shapes give 0. */
int session_build_pod_succeeded(const struct json_object *pod, const char *job_uid);

/* Whether the build pods' informer (indexed by BUILD_POD_INDEX_TAG) holds a Succeeded pod of
 * the Job job_uid building tag. pods may be NULL (no informer): 0. */
int session_build_pods_succeeded(const struct ctrl_informer *pods, const char *tag,
                                 const char *job_uid);

#endif
