/* The decisions of one TeloSession reconcile: what was observed in, the writes to make out. */
#include "session/plan.h"

#include "imagebuild/job.h"
#include "kube/objects.h"
#include "session/builds.h"
#include "session/desired.h"
#include "session/limits.h"
#include "session/phase.h"
#include "session/runs.h"
#include "util/err.h"
#include "util/jget.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <stdio.h>
#include <string.h>

/* The classification of the session's children this pass (issue 21). */
struct children {
    char child[64], secret[80];
    enum session_owner pod, secret_owner, service, ingress;
    char conflict[400];    /* the NameConflict message of the first child held by another */
    unsigned conflicts;    /* bits (1 << child) of the children held by another */
    unsigned taken;        /* of those, the ones held outside the caches (a create's 409) */
    const char *replacing; /* the kind of the first child a deleted predecessor left */
};

unsigned long long session_plan_body_hash(struct json_object *body)
{
    unsigned long long h =
        strmap_hash(json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
    return h ? h : 1;
}

/* --- expectations ---------------------------------------------------------------------------- */

static int held(const struct session_plan_obs *obs, enum session_plan_child c,
                unsigned long long body)
{
    const struct session_plan_expect *e = &obs->expect[c];
    return e->held && e->until > obs->now && !(body && e->body != body);
}

/* Whether a write of body (0: any) to child is still on its way into the cache. If so, the pass
 * is looked at again when the expectation lapses, in case the cache never shows it. */
static int pending(const struct session_plan_obs *obs, struct session_plan *out,
                   enum session_plan_child c, unsigned long long body)
{
    if (!held(obs, c, body))
        return 0;
    double left = obs->expect[c].until - obs->now;
    if (out->requeue_after == 0 || left < out->requeue_after)
        out->requeue_after = left + 0.1;
    return 1;
}

static void requeue_within(struct session_plan *out, double seconds)
{
    if (seconds > 0 && (out->requeue_after == 0 || seconds < out->requeue_after))
        out->requeue_after = seconds;
}

/* --- before the plan ---------------------------------------------------------------------------
 */

static int keep_image(const struct session_plan_obs *obs)
{
    return session_builds_needed(obs->cfg, obs->s);
}

/* Whether this pass may create the session's pod, so the bundle (and with builds the image)
 * must be known first. */
static int may_create(const struct session_plan_obs *obs)
{
    const struct session *s = obs->s;
    enum session_owner pod = session_child_owner(obs->pod, s->name, s->uid);
    /* A status without a phase is a new session's; one this operator did not write is not. */
    const char *text = jget_string(s->status, "phase");
    enum session_phase phase = session_phase_parse(text);
    int pod_expected = !obs->pod && held(obs, SESSION_PLAN_POD, 0);
    return pod != SESSION_OWNER_OWN && !pod_expected && !s->stopped && !obs->limit_waiting &&
           !jget_string(s->status, "podName") &&
           (!text || phase == SESSION_PHASE_PENDING || phase == SESSION_PHASE_BUILDING);
}

enum session_plan_learn session_plan_learn(const struct session_plan_obs *obs)
{
    if (!may_create(obs))
        return SESSION_PLAN_LEARN_NOTHING;
    int keep = keep_image(obs);
    /* A build runs its base image's programs with the push credentials mounted: only images
     * the operator allows, before the bundle is even read. */
    if (keep && !session_base_image_allowed(obs->cfg, session_image(obs->s, obs->cfg)))
        return SESSION_PLAN_LEARN_REFUSED;
    /* The operator reads a URL bundle itself to know its tag; the build fetches it again. */
    if (keep && obs->s->bundle_url)
        return SESSION_PLAN_LEARN_URL_KEY;
    if (obs->s->bundle_configmap)
        return SESSION_PLAN_LEARN_BUNDLE;
    return SESSION_PLAN_LEARN_NOTHING;
}

/* --- writes ------------------------------------------------------------------------------------
 */

static struct session_plan_write *add_write(struct session_plan *out, enum session_plan_verb verb,
                                            enum session_plan_child child, const char *name,
                                            struct json_object *obj)
{
    if (out->nwrites == SESSION_PLAN_MAX_WRITES) {
        json_object_put(obj);
        return NULL;
    }
    struct session_plan_write *w = &out->writes[out->nwrites++];
    memset(w, 0, sizeof(*w));
    w->verb = verb;
    w->child = child;
    w->grace = -1;
    w->obj = obj;
    snprintf(w->name, sizeof(w->name), "%s", name);
    return w;
}

/* A delete of the object the plan saw under name, with uid (NULL: none) as its precondition:
 * only while the name still holds that object. */
static void add_delete(struct session_plan *out, enum session_plan_child child, const char *name,
                       const char *uid)
{
    struct session_plan_write *w = add_write(out, SESSION_PLAN_DELETE, child, name, NULL);
    if (w && uid)
        snprintf(w->uid, sizeof(w->uid), "%s", uid);
}

static const char *uid_of(const struct json_object *obj)
{
    return jget_string(jget((struct json_object *)obj, "metadata"), "uid");
}

/* --- children that are not the session's (issue 21) --------------------------------------------
 */

/* Classifies child (cached under one of the session's names; NULL: none) and notes what it calls
 * for: a conflict to report, or a predecessor's child to replace. */
static enum session_owner note_child(const struct session_plan_obs *obs, struct session_plan *out,
                                     struct children *ch, struct json_object *child,
                                     const char *kind, enum session_plan_child which,
                                     const char *name)
{
    const struct session *s = obs->s;
    enum session_owner owner = session_child_owner(child, s->name, s->uid);
    /* An object without the operator's labels is outside the caches: only our create, answered
     * AlreadyExists, shows it. The create stays planned, held back until it is due again. */
    int taken = !child && session_refusal_name_taken(&obs->refusal[which]);
    if ((owner == SESSION_OWNER_FOREIGN || taken) && !ch->conflict[0]) {
        session_conflict_message(kind, s->namespace, name, ch->conflict, sizeof(ch->conflict));
        out->conflict_kind = kind;
        snprintf(out->conflict_name, sizeof(out->conflict_name), "%s", name);
    }
    if (owner == SESSION_OWNER_FOREIGN || taken)
        ch->conflicts |= 1u << which;
    if (taken)
        ch->taken |= 1u << which;
    if (owner != SESSION_OWNER_PREDECESSOR)
        return owner;
    if (!ch->replacing)
        ch->replacing = kind;
    struct json_object *meta = jget(child, "metadata");
    const char *uid = jget_string(meta, "uid");
    const char *owner_uid = session_controller_uid(child);
    /* One on its way out already (the garbage collector or our earlier delete) only needs
     * waiting for: its deletion's event queues the session again. */
    if (jget(meta, "deletionTimestamp") || !uid || !owner_uid ||
        out->ngone == SESSION_PLAN_MAX_GONE)
        return owner;
    struct session_plan_gone *g = &out->gone[out->ngone++];
    g->child = which;
    snprintf(g->name, sizeof(g->name), "%s", name);
    snprintf(g->uid, sizeof(g->uid), "%s", uid);
    snprintf(g->owner_uid, sizeof(g->owner_uid), "%s", owner_uid);
    return owner;
}

static void note_children(const struct session_plan_obs *obs, struct session_plan *out,
                          struct children *ch)
{
    memset(ch, 0, sizeof(*ch));
    session_child_name(obs->s, ch->child, sizeof(ch->child));
    session_secret_name(obs->s, ch->secret, sizeof(ch->secret));
    /* The pod first: its replacement is what the session waits for. */
    ch->pod = note_child(obs, out, ch, obs->pod, "pod", SESSION_PLAN_POD, ch->child);
    ch->service =
        note_child(obs, out, ch, obs->service, "service", SESSION_PLAN_SERVICE, ch->child);
    ch->ingress =
        note_child(obs, out, ch, obs->ingress, "ingress", SESSION_PLAN_INGRESS, ch->child);
    ch->secret_owner =
        note_child(obs, out, ch, obs->secret, "secret", SESSION_PLAN_SECRET, ch->secret);
}

/* --- the image step ----------------------------------------------------------------------------
 */

/* The image step from what the executor gathered, or the refusal of a base image not allowed.
 * Returns 1 when the step waits on an answer (nothing else is planned). */
static int plan_image(const struct session_plan_obs *obs, struct session_plan *out)
{
    if (obs->image) {
        struct session_image_obs img = *obs->image;
        int builds = !img.bundle_error && !img.no_dependencies;
        img.job_expected = !img.job && builds && pending(obs, out, SESSION_PLAN_JOB, 0);
        session_image_decide(&img, &out->image);
        out->has_image = 1;
        if (out->image.step == SESSION_IMAGE_WAIT) {
            out->wait = 1;
            if (out->requeue_after == 0 || out->requeue_after > SESSION_PLAN_ANSWER_WAIT_S)
                out->requeue_after = SESSION_PLAN_ANSWER_WAIT_S;
            return 1;
        }
        return 0;
    }
    if (!obs->blocked_reason && session_plan_learn(obs) == SESSION_PLAN_LEARN_REFUSED) {
        /* The session waits for a new spec.image (or an operator allowing it). */
        const char *base = session_image(obs->s, obs->cfg);
        memset(&out->image, 0, sizeof(out->image));
        out->image.step = SESSION_IMAGE_BLOCKED;
        snprintf(out->image.failure, sizeof(out->image.failure), "ImageNotAllowed");
        session_base_image_refusal(obs->cfg, base, out->image.message, sizeof(out->image.message));
        out->has_image = 1;
    }
    return 0;
}

/* The build Job of the image step: telo-build-<tag> in the build namespace. */
static void plan_job(const struct session_plan_obs *obs, struct session_plan *out)
{
    const struct session_image_obs *img = obs->image;
    struct build_config bc;
    session_builds_job_config(obs->cfg, &bc);
    bc.telo_registry_url = obs->s->registry_url ? obs->s->registry_url : obs->cfg->registry_url;
    char tag[BUILD_TAG_LEN + 1];
    snprintf(tag, sizeof(tag), "%.*s", BUILD_TAG_LEN, img->tag);
    struct build_job_input in = {
        .tag = tag,
        .base_image = session_image(obs->s, obs->cfg),
        /* The digest the tag was keyed with (session_base_digest_tag), pinned in FROM. */
        .base_digest = img->base_digest_wanted && img->base_digest &&
                               img->base_digest->state != SESSION_DIGEST_NONE
                           ? img->base_digest->digest
                           : NULL,
        .entry = obs->s->entry,
        .requested_by = img->self,
        /* The context: the bundle's copy in a ConfigMap beside the Job, or the URL. */
        .bundle_configmap = obs->s->bundle_url ? NULL : img->job_name,
        .bundle_url = obs->s->bundle_url,
        .bundle_sha256 = obs->s->bundle_sha256,
    };
    struct telo_err err;
    telo_err_clear(&err);
    struct json_object *job = build_desired_job(&bc, &in, &err);
    if (!job) {
        snprintf(out->error, sizeof(out->error),
                 "cannot build the Job object for image %.300s: %.150s", img->ref, err.msg);
        return;
    }
    struct session_plan_write *w =
        add_write(out, SESSION_PLAN_CREATE, SESSION_PLAN_JOB, img->job_name, job);
    if (w)
        w->expect = 1;
}

/* --- the children ------------------------------------------------------------------------------
 */

/* Whether the cached child's spec already holds what we would apply. */
static int same_field(struct json_object *cached_obj, struct json_object *desired,
                      const char *section, const char *field)
{
    struct json_object *a = jget(jget(cached_obj, section), field);
    struct json_object *b = jget(jget(desired, section), field);
    return (a == NULL && b == NULL) || (a && b && json_object_equal(a, b));
}

/* Every annotation the operator wants (ingress.annotations) is on the object with its value,
 * and none it applied before and no longer wants (SESSION_INGRESS_ANNOTATION_KEYS names those it
 * applied: its value differs, or it is there while none is wanted). Others' annotations
 * (cert-manager's, an ingress controller's) do not count. */
static int has_annotations(struct json_object *have, struct json_object *want)
{
    struct json_object *wanted = jget_object(jget(want, "metadata"), "annotations");
    struct json_object *there = jget_object(jget(have, "metadata"), "annotations");
    if (wanted == NULL)
        return jget(there, SESSION_INGRESS_ANNOTATION_KEYS) == NULL;
    json_object_object_foreach(wanted, key, value)
    {
        struct json_object *v = jget(there, key);
        if (v == NULL || !json_object_equal(v, value))
            return 0;
    }
    return 1;
}

static int same_ingress(struct json_object *have, struct json_object *want)
{
    return same_field(have, want, "spec", "rules") && same_field(have, want, "spec", "tls") &&
           same_field(have, want, "spec", "ingressClassName") && has_annotations(have, want);
}

/* patch's field: want's value (a list goes whole), or null when have has one and want none. */
static void patch_field(struct json_object *patch, struct json_object *have,
                        struct json_object *want, const char *field)
{
    struct json_object *v = jget(want, field);
    if (v)
        kube_obj_put(patch, field, json_object_get(v));
    else if (jget(have, field))
        json_object_object_add(patch, field, NULL); /* a JSON null: remove it */
}

/* to gains every member of from (shared). */
static void put_all(struct json_object *to, struct json_object *from)
{
    json_object_object_foreach(from, key, value)
    {
        kube_obj_put(to, key, json_object_get(value));
    }
}

/* The annotations patch of an Ingress: those wanted, and null for each one have says we applied
 * (SESSION_INGRESS_ANNOTATION_KEYS, comma-separated) that is wanted no more. NULL: none. */
static struct json_object *annotations_patch(struct json_object *have, struct json_object *want)
{
    struct json_object *wanted = jget_object(jget(want, "metadata"), "annotations");
    const char *applied = jget_string(jget_object(jget(have, "metadata"), "annotations"),
                                      SESSION_INGRESS_ANNOTATION_KEYS);
    struct json_object *patch = json_object_new_object();
    if (wanted)
        put_all(patch, wanted);
    char key[320];
    for (const char *k = applied; k && *k;) {
        size_t n = strcspn(k, ",");
        if (n > 0 && n < sizeof(key)) {
            memcpy(key, k, n);
            key[n] = '\0';
            if (!jget(wanted, key))
                json_object_object_add(patch, key, NULL);
        }
        k += n + (k[n] == ',');
    }
    if (applied && !jget(wanted, SESSION_INGRESS_ANNOTATION_KEYS))
        json_object_object_add(patch, SESSION_INGRESS_ANNOTATION_KEYS, NULL);
    if (json_object_object_length(patch) == 0) {
        json_object_put(patch);
        return NULL;
    }
    return patch;
}

/* The merge patch that brings have, the session's own Service or Ingress, to want in what the
 * plan compares (same_field, same_ingress). Not server-side apply: the child was created by a
 * POST (never overwriting), and fields a create set are not removed by a later apply of the same
 * manager. metadata.uid is have's: the patch cannot land on an object that took the name since. */
static struct json_object *update_patch(struct json_object *have, struct json_object *want,
                                        int service)
{
    struct json_object *patch = json_object_new_object(), *meta = json_object_new_object();
    struct json_object *spec = json_object_new_object();
    struct json_object *have_spec = jget(have, "spec"), *want_spec = jget(want, "spec");
    kube_obj_put_str(meta, "uid", uid_of(have));
    if (service) {
        patch_field(spec, have_spec, want_spec, "ports");
    } else {
        patch_field(spec, have_spec, want_spec, "rules");
        patch_field(spec, have_spec, want_spec, "tls");
        patch_field(spec, have_spec, want_spec, "ingressClassName");
        struct json_object *annotations = annotations_patch(have, want);
        if (annotations)
            kube_obj_put(meta, "annotations", annotations);
    }
    kube_obj_put(patch, "metadata", meta);
    kube_obj_put(patch, "spec", spec);
    return patch;
}

/* Service and Ingress follow the spec while the session lives (wanted), and go once it is
 * stopped, as the reference runner's did with their pod. Only the session's own is patched or
 * deleted here; another's was noted (note_child) and is replaced or left alone. */
static void plan_routed(const struct session_plan_obs *obs, struct session_plan *out,
                        const struct children *ch, enum session_plan_child which, int wanted)
{
    int service = which == SESSION_PLAN_SERVICE;
    enum session_owner owner = service ? ch->service : ch->ingress;
    if (owner != SESSION_OWNER_OWN && owner != SESSION_OWNER_NONE)
        return;
    struct json_object *have = service ? obs->service : obs->ingress;
    struct json_object *want = NULL;
    if (wanted)
        want = service ? session_desired_service(obs->s, obs->cfg)
                       : session_desired_ingress(obs->s, obs->cfg);
    int same = have && want &&
               (service ? same_field(have, want, "spec", "ports") : same_ingress(have, want));
    if (want && have && !same) {
        add_write(out, SESSION_PLAN_PATCH, which, ch->child, update_patch(have, want, service));
    } else if (want && !have) {
        unsigned long long h = session_plan_body_hash(want);
        if (!pending(obs, out, which, h)) {
            struct session_plan_write *w =
                add_write(out, SESSION_PLAN_CREATE, which, ch->child, json_object_get(want));
            if (w) {
                w->expect = 1;
                w->body_hash = h;
            }
        }
    } else if (!want && have) {
        add_delete(out, which, ch->child, uid_of(have));
    }
    json_object_put(want);
}

/* The attach-token Secret exists only while spec.attachToken asks for it (issue 20: most
 * sessions are attached with people's own credentials, and a Secret per session was a quarter of
 * the operator's API writes). Turned off, ours is deleted: that revokes the token. */
static void plan_secret(const struct session_plan_obs *obs, struct session_plan *out,
                        const struct children *ch, int live)
{
    if (!obs->s->attach_token) {
        if (ch->secret_owner == SESSION_OWNER_OWN)
            add_delete(out, SESSION_PLAN_SECRET, ch->secret, uid_of(obs->secret));
        return;
    }
    if (!live || ch->secret_owner != SESSION_OWNER_NONE ||
        pending(obs, out, SESSION_PLAN_SECRET, 0))
        return;
    struct session_plan_write *w =
        add_write(out, SESSION_PLAN_CREATE, SESSION_PLAN_SECRET, ch->secret,
                  session_desired_secret(obs->s, obs->cfg, ""));
    if (w) {
        w->expect = 1;
        w->fill_token = 1;
    }
}

/* The pod's create: a new session (Pending) whose pod is neither there nor on its way, nothing
 * blocking it (a missing bundle, another child's name held by another, an image not decided or
 * refused). A pod name taken outside the caches is created again when due (hold_refused).
 * Returns 1 when it is created. */
static int plan_pod(const struct session_plan_obs *obs, struct session_plan *out,
                    const struct children *ch, enum session_phase phase)
{
    const struct session_image_plan *img = out->has_image ? &out->image : NULL;
    /* A session whose image comes from a build gets a pod only once the step says READY. */
    int ready = img && img->step == SESSION_IMAGE_READY;
    int image_ready = keep_image(obs) ? ready : 1;
    int pod_expected = !obs->pod && held(obs, SESSION_PLAN_POD, 0);
    if (obs->pod || phase != SESSION_PHASE_PENDING || obs->blocked_reason || pod_expected ||
        (ch->conflicts & ~(1u << SESSION_PLAN_POD)) || !image_ready ||
        (img && img->step == SESSION_IMAGE_BLOCKED) || obs->limit_waiting ||
        session_restart_due(obs->s) != SESSION_RESTART_NONE)
        return 0; /* a new run's pod waits for the status that starts the run (its label) */
    const char *image = ready ? img->ref : session_image(obs->s, obs->cfg);
    struct json_object *pod = session_desired_pod(obs->s, obs->cfg, image);
    session_run_label_pod(obs->s, pod);
    struct session_plan_write *w =
        add_write(out, SESSION_PLAN_CREATE, SESSION_PLAN_POD, ch->child, pod);
    if (!w)
        return 0;
    w->expect = 1;
    w->counts_start = 1;
    return 1;
}

/* The writes of a session that stays (not deleted by its TTL), in phase. Returns 1 when the
 * pod is being created this pass. */
static int plan_children(const struct session_plan_obs *obs, struct session_plan *out,
                         const struct children *ch, const struct session_verdict *v,
                         enum session_phase phase)
{
    int live = phase == SESSION_PHASE_PENDING || phase == SESSION_PHASE_BUILDING ||
               phase == SESSION_PHASE_PROVISIONING || phase == SESSION_PHASE_RUNNING;
    if (out->has_image && out->image.create_job && phase == SESSION_PHASE_BUILDING && obs->image)
        plan_job(obs, out);
    int creating = plan_pod(obs, out, ch, phase);
    if (v->delete_pod && ch->pod == SESSION_OWNER_OWN)
        add_delete(out, SESSION_PLAN_POD, ch->child, uid_of(obs->pod));
    if (phase == SESSION_PHASE_STOPPED) {
        plan_routed(obs, out, ch, SESSION_PLAN_SERVICE, 0);
        plan_routed(obs, out, ch, SESSION_PLAN_INGRESS, 0);
    }
    /* A session waiting for a slot gets no children yet (a quota may count them too). */
    if (live && !obs->limit_waiting) {
        plan_routed(obs, out, ch, SESSION_PLAN_SERVICE, 1);
        plan_routed(obs, out, ch, SESSION_PLAN_INGRESS, 1);
    }
    plan_secret(obs, out, ch, live && !obs->limit_waiting);
    return creating;
}

/* --- refused writes (issue 17) -----------------------------------------------------------------
 */

_Static_assert(SESSION_PLAN_JOB + 1 == SESSION_REFUSAL_NCHILDREN,
               "refusals are kept for the pod, Secret, Service, Ingress and build Job");

/* A child whose write was refused is written again only once its backoff is over, or at once for
 * a new spec (the user may have fixed what was refused). Returns the bits (1 << child) of the
 * children the plan writes or holds back; *creating stays 1 only if the pod's create remains. */
static unsigned hold_refused(const struct session_plan_obs *obs, struct session_plan *out,
                             int *creating)
{
    unsigned wanted = 0;
    size_t kept = 0;
    *creating = 0;
    for (size_t i = 0; i < out->nwrites; i++) {
        struct session_plan_write *w = &out->writes[i];
        int c = (int)w->child;
        if (w->verb != SESSION_PLAN_DELETE && c < SESSION_REFUSAL_NCHILDREN) {
            wanted |= 1u << c;
            const struct session_refusal *r = &obs->refusal[c];
            double retry = r->held ? session_refusal_retry_at(r) : 0;
            if (r->held && r->generation == obs->s->generation && obs->now < retry) {
                requeue_within(out, retry - obs->now);
                json_object_put(w->obj);
                w->obj = NULL;
                continue;
            }
        }
        if (w->counts_start)
            *creating = 1;
        if (kept != i)
            out->writes[kept] = *w;
        kept++;
    }
    out->nwrites = kept;
    return wanted;
}

/* The refusals the status shows: those of children still wanted (the latest), and the rest the
 * executor forgets. A status computed with another refusal is computed again (the phase does not
 * depend on which refusal is shown, so the writes stand); a finished one keeps what ended it. */
static int settle_refusals(const struct session_plan_obs *obs, struct session_observation *so,
                           struct session_plan *out, unsigned wanted)
{
    unsigned held_bits = 0;
    for (int c = 0; c < SESSION_REFUSAL_NCHILDREN; c++)
        held_bits |= obs->refusal[c].held ? 1u << c : 0;
    out->refusal_clear = held_bits & ~wanted;
    if (session_phase_is_terminal(session_phase_of(out->verdict.status)))
        return 0;
    const struct session_refusal *shown =
        obs->s->stopped ? NULL : session_refusal_latest(obs->refusal, wanted);
    if (shown == so->refusal)
        return 0;
    so->refusal = shown;
    struct session_verdict again;
    if (session_status_compute(so, &again) < 0)
        return -1;
    session_verdict_release(&out->verdict);
    out->verdict = again;
    return 0;
}

/* --- the status --------------------------------------------------------------------------------
 */

/* The metrics a status write carries: computed from the transition it makes. */
static void plan_metrics(const struct session_plan_obs *obs, struct session_plan *out,
                         enum session_phase phase)
{
    struct json_object *status = out->verdict.status, *old = obs->s->status;
    enum session_phase old_phase = session_phase_of(old);
    if (phase == SESSION_PHASE_FAILED && old_phase != SESSION_PHASE_FAILED) {
        const char *reason = jget_string(status, "reason");
        out->failed_reason = reason && *reason ? reason : "Unknown";
    }
    out->cache_hit = jget_string_is(jget(status, "image"), "reason", "CacheHit") &&
                     !jget_string_is(jget(old, "image"), "reason", "CacheHit");
    if (phase == SESSION_PHASE_RUNNING && old_phase != SESSION_PHASE_RUNNING) {
        double created =
            timefmt_parse(jget_string(jget(obs->s->obj, "metadata"), "creationTimestamp"));
        /* A resumed or restarted run starts when the previous one ended (issue 17). */
        const char *last = jget_string(jget(status, "lastRun"), "finishedAt");
        if (last && timefmt_parse(last) > created)
            created = timefmt_parse(last);
        if (created >= 0)
            out->startup_seconds = obs->now - created;
    }
}

/* Whether the verdict's status is written now: a new session's first status may wait for its
 * pod, or for the pod to settle, and a PodDisappeared from a pass that read the pod cache a
 * while ago waits for a second look. */
static void plan_status(const struct session_plan_obs *obs, const struct session_observation *so,
                        struct session_plan *out, int waiting_pod)
{
    struct session_verdict *v = &out->verdict;
    /* Also in a pass that runs before the pod we created reaches the cache (the Secret's event
     * came first): the pod's arrival still writes what follows. */
    if (waiting_pod && session_status_wait_for_pod(so, v)) {
        out->deferred = *v;
        v->status = NULL;
        v->changed = 0;
    }
    double settle = session_status_settle(so, v);
    if (settle > 0) {
        v->changed = 0;
        if (v->requeue_after == 0 || settle < v->requeue_after)
            v->requeue_after = settle;
    }
    if (v->changed && jget_string_is(v->status, "reason", "PodDisappeared") &&
        session_phase_of(obs->s->status) != SESSION_PHASE_FAILED && obs->pod_back) {
        /* A terminal verdict from a pass that read the pod cache a while ago (a bundle read in
         * between): the pod is there after all. Look again. */
        v->changed = 0;
        v->requeue_after = 0.5;
    }
}

static void plan_requeue(const struct session_plan_obs *obs, struct session_plan *out,
                         const struct children *ch)
{
    requeue_within(out, out->verdict.requeue_after);
    if (out->has_image)
        requeue_within(out, out->image.requeue_after);
    int blocked =
        obs->blocked_reason || (out->has_image && out->image.step == SESSION_IMAGE_BLOCKED);
    /* A predecessor's child: the deletions' events come first, normally. Someone else's in the
     * cache: it may carry no owner reference to map its deletion back to the session, so look
     * again. A name taken outside the caches is looked at by its create, when that is due: the
     * cache would show nothing meanwhile. */
    if (obs->limit_waiting)
        requeue_within(out, SESSION_LIMITS_RECHECK_S);
    if (blocked || ch->replacing || (ch->conflicts & ~ch->taken)) {
        if (out->requeue_after == 0 || out->requeue_after > SESSION_PLAN_BLOCKED_RECHECK_S)
            out->requeue_after = SESSION_PLAN_BLOCKED_RECHECK_S;
    }
}

int session_plan_make(const struct session_plan_obs *obs, struct session_plan *out)
{
    memset(out, 0, sizeof(*out));
    out->startup_seconds = -1;
    const struct session *s = obs->s;
    int pod_expected = !obs->pod && pending(obs, out, SESSION_PLAN_POD, 0);
    if (plan_image(obs, out))
        return 0;
    struct children ch;
    note_children(obs, out, &ch);
    const struct session_image_plan *img = out->has_image ? &out->image : NULL;
    struct session_observation so = {
        .s = s,
        .cfg = obs->cfg,
        .pod = obs->pod,
        .conflict = ch.conflict[0] ? ch.conflict : NULL,
        .replacing = ch.replacing,
        .image = img && img->step == SESSION_IMAGE_READY ? img->ref : session_image(s, obs->cfg),
        /* The Secret we applied may reach the cache after the pod: status.attach names it as
         * soon as the API server has it, not one status write later. A predecessor's Secret
         * holds a token the previous session's users knew: never the session's. */
        .attach_secret = obs->s->attach_token && (ch.secret_owner == SESSION_OWNER_OWN ||
                                                  (ch.secret_owner == SESSION_OWNER_NONE &&
                                                   held(obs, SESSION_PLAN_SECRET, 0))),
        .now = obs->now,
        .blocked_reason = obs->blocked_reason,
        .blocked_message = obs->blocked_message,
        .image_plan = img,
        .keep_image = keep_image(obs),
        .reach = obs->reach,
        .refusal = s->stopped ? NULL : session_refusal_latest(obs->refusal, ~0u),
        .waiting_reason = obs->limit_waiting ? SESSION_LIMITS_REASON : NULL,
        .waiting_message = obs->limit_message,
        .queue_position = obs->queue_position,
    };
    if (session_status_compute(&so, &out->verdict) < 0) {
        session_plan_release(out);
        return -TELO_ENOMEM;
    }
    if (out->verdict.delete_session) {
        /* The session goes: no status to write to it, nor an Event. */
        out->verdict.changed = 0;
        add_delete(out, SESSION_PLAN_SESSION, s->name, s->uid);
    } else {
        enum session_phase phase = session_phase_of(out->verdict.status);
        int creating = plan_children(obs, out, &ch, &out->verdict, phase);
        unsigned wanted = hold_refused(obs, out, &creating);
        if (settle_refusals(obs, &so, out, wanted) < 0) {
            session_plan_release(out);
            return -TELO_ENOMEM;
        }
        plan_status(obs, &so, out, creating || pod_expected);
        if (out->verdict.changed)
            plan_metrics(obs, out, phase);
    }
    plan_requeue(obs, out, &ch);
    return 0;
}

void session_plan_release(struct session_plan *plan)
{
    if (!plan)
        return;
    for (size_t i = 0; i < plan->nwrites; i++) {
        json_object_put(plan->writes[i].obj);
        plan->writes[i].obj = NULL;
    }
    plan->nwrites = 0;
    session_verdict_release(&plan->verdict);
    session_verdict_release(&plan->deferred);
}
