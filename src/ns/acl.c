// SPDX-License-Identifier: GPL-2.0
#include "acl.h"

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ACL_VERSION	2
#define TAG_USER_OBJ	0x01
#define TAG_USER	0x02
#define TAG_GROUP_OBJ	0x04
#define TAG_GROUP	0x08
#define TAG_MASK	0x10
#define TAG_OTHER	0x20

struct acl_ent {
	uint16_t tag;
	uint16_t perm;
	uint32_t id;
} __attribute__((packed));

/* The entries of a well-formed ACL, or NULL. */
static struct acl_ent *entries(const void *val, size_t len, size_t *n)
{
	uint32_t version;

	if (len < 4 || (len - 4) % sizeof(struct acl_ent))
		return NULL;
	memcpy(&version, val, 4);
	if (le32toh(version) != ACL_VERSION)
		return NULL;
	*n = (len - 4) / sizeof(struct acl_ent);
	return (struct acl_ent *)((char *)val + 4);
}

/* Find the class entries; -EINVAL unless user_obj, group_obj and other are there. */
static int classes(struct acl_ent *e, size_t n, struct acl_ent **u, struct acl_ent **g,
		   struct acl_ent **m, struct acl_ent **o, int *named)
{
	size_t i;

	*u = *g = *m = *o = NULL;
	*named = 0;
	for (i = 0; i < n; i++) {
		switch (le16toh(e[i].tag)) {
		case TAG_USER_OBJ: *u = &e[i]; break;
		case TAG_GROUP_OBJ: *g = &e[i]; break;
		case TAG_MASK: *m = &e[i]; break;
		case TAG_OTHER: *o = &e[i]; break;
		case TAG_USER:
		case TAG_GROUP: *named = 1; break;
		default: return -EINVAL;
		}
		if (le16toh(e[i].perm) & ~7)
			return -EINVAL;
	}
	if (!*u || !*g || !*o || (*named && !*m))
		return -EINVAL;
	return 0;
}

/* A well-formed ACL's class entries. */
static int parse(const void *val, size_t len, struct acl_ent **u, struct acl_ent **g,
		 struct acl_ent **m, struct acl_ent **o, int *named)
{
	size_t n;
	struct acl_ent *e = entries(val, len, &n);

	return e ? classes(e, n, u, g, m, o, named) : -EINVAL;
}

int acl_to_mode(const void *val, size_t len, mode_t *perm, int *equiv)
{
	struct acl_ent *u, *g, *m, *o;
	int named, ret = parse(val, len, &u, &g, &m, &o, &named);

	if (ret)
		return ret;
	*perm = (mode_t)((le16toh(u->perm) << 6) | (le16toh((m ? m : g)->perm) << 3) | le16toh(o->perm));
	*equiv = !named && !m;
	return 0;
}

int acl_chmod(void *val, size_t len, mode_t mode)
{
	struct acl_ent *u, *g, *m, *o;
	int named, ret = parse(val, len, &u, &g, &m, &o, &named);

	if (ret)
		return ret;
	u->perm = htole16((mode >> 6) & 7);
	(m ? m : g)->perm = htole16((mode >> 3) & 7);
	o->perm = htole16(mode & 7);
	return 0;
}

int acl_inherit(const void *dflt, size_t len, mode_t *mode, void **acc, size_t *acclen)
{
	struct acl_ent *u, *g, *m, *o;
	mode_t perm;
	int named, ret, equiv;
	void *copy;

	*acc = NULL;
	*acclen = 0;
	copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, dflt, len);
	ret = parse(copy, len, &u, &g, &m, &o, &named);
	if (ret) {
		free(copy);
		return ret;
	}
	u->perm = htole16(le16toh(u->perm) & ((*mode >> 6) & 7));
	(m ? m : g)->perm = htole16(le16toh((m ? m : g)->perm) & ((*mode >> 3) & 7));
	o->perm = htole16(le16toh(o->perm) & (*mode & 7));
	acl_to_mode(copy, len, &perm, &equiv);
	*mode = (*mode & ~(mode_t)0777) | perm;
	if (equiv) {
		free(copy);
		return 0;
	}
	*acc = copy;
	*acclen = len;
	return 0;
}
