/* A hash map from C strings to pointers, with open addressing. */
#include "util/strmap.h"

#include "util/err.h"

#include <stdlib.h>
#include <string.h>

/* A slot is empty (key NULL, value NULL), a tombstone (key NULL, value TOMBSTONE) or used. */
static char tombstone_marker;
#define TOMBSTONE ((void *)&tombstone_marker)

struct slot {
    const char *key;
    void *value;
    unsigned long long hash;
};

struct strmap {
    struct slot *slots;
    size_t cap;  /* a power of two, or 0 */
    size_t len;  /* used slots */
    size_t dead; /* tombstones */
};

unsigned long long strmap_hash(const char *key)
{
    unsigned long long h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

struct strmap *strmap_new(void)
{
    return calloc(1, sizeof(struct strmap));
}

void strmap_free(struct strmap *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m);
}

/* Returns the slot holding key, or NULL. */
static struct slot *find(const struct strmap *m, const char *key, unsigned long long hash)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        struct slot *s = &m->slots[i];
        if (s->key == NULL && s->value != TOMBSTONE)
            return NULL;
        if (s->key && s->hash == hash && strcmp(s->key, key) == 0)
            return s;
    }
}

static int resize(struct strmap *m, size_t cap)
{
    struct slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -TELO_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct slot *s = &m->slots[i];
        if (!s->key)
            continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    m->dead = 0;
    return 0;
}

void *strmap_get(const struct strmap *m, const char *key)
{
    struct slot *s = find(m, key, strmap_hash(key));
    return s ? s->value : NULL;
}

void *strmap_get_or_add(struct strmap *m, const char *key, size_t size, size_t key_at)
{
    void *value = strmap_get(m, key);
    if (value)
        return value;
    size_t len = strlen(key);
    if (!(value = calloc(1, size + len + 1)))
        return NULL;
    char *copy = (char *)value + key_at;
    memcpy(copy, key, len + 1);
    if (strmap_put(m, copy, value) < 0) {
        free(value);
        return NULL;
    }
    return value;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
    unsigned long long hash = strmap_hash(key);
    struct slot *s = find(m, key, hash);
    if (s) {
        s->key = key;
        s->value = value;
        return 0;
    }
    /* Keep the load (used + tombstones) under 3/4 so probes stay short. */
    if ((m->len + m->dead + 1) * 4 > m->cap * 3) {
        /* Rehashing also clears tombstones, so the size only doubles when live entries need it.
         * Small first: an index bucket often holds a single object. */
        size_t cap = m->cap ? m->cap : 4;
        while ((m->len + 1) * 2 > cap)
            cap *= 2;
        int rc = resize(m, cap);
        if (rc < 0)
            return rc;
    }
    size_t mask = m->cap - 1;
    size_t i = hash & mask;
    while (m->slots[i].key)
        i = (i + 1) & mask;
    if (m->slots[i].value == TOMBSTONE)
        m->dead--;
    m->slots[i] = (struct slot){.key = key, .value = value, .hash = hash};
    m->len++;
    return 0;
}

void *strmap_remove(struct strmap *m, const char *key)
{
    struct slot *s = find(m, key, strmap_hash(key));
    if (!s)
        return NULL;
    void *value = s->value;
    s->key = NULL;
    s->value = TOMBSTONE;
    m->len--;
    m->dead++;
    return value;
}

size_t strmap_len(const struct strmap *m)
{
    return m->len;
}

int strmap_next(const struct strmap *m, struct strmap_iter *it, const char **key, void **value)
{
    while (it->slot < m->cap) {
        const struct slot *s = &m->slots[it->slot++];
        if (s->key) {
            *key = s->key;
            *value = s->value;
            return 1;
        }
    }
    return 0;
}

size_t strmap_bytes(const struct strmap *m)
{
    return sizeof(*m) + m->cap * sizeof(struct slot);
}
