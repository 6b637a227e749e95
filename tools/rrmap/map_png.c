// SPDX-License-Identifier: GPL-2.0
/*
 * rrmap's picture: one panel per image, side by side; in each, one cell per
 * block group in address order (left to right, then down), coloured by the
 * fraction of its blocks in use.  Groups holding a superblock copy get a
 * dot, flex-group leaders (which hold the flex group's bitmaps and inode
 * tables) a frame, groups holding file blocks (touched) a dark corner.  Devices with more groups than MPNG_MAX_CELLS draw a
 * cell per fixed run of groups (a fixed LBA range), so the picture keeps a
 * sensible size.  Drawing and PNG encoding are cairo's.
 */
#include "rrmap.h"

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MPNG_MAX_CELLS	4096	/* cells per panel at most: above, a cell covers several groups */
#define MPNG_PANEL_W	480	/* width a panel's grid aims at, pixels */
#define MPNG_CELL_MIN	4	/* smallest cell, pixels: smaller could not show its marks */
#define MPNG_CELL_MAX	40	/* largest cell, pixels: a tiny image stays a small picture */
#define MPNG_MARGIN	24	/* around and between panels, pixels */
#define MPNG_TITLE_H	64	/* the picture's title */
#define MPNG_SUB_H	40	/* a panel's two lines of caption */
#define MPNG_LEGEND_H	70	/* the colour bar and the marks' key */
#define MPNG_FONT	13	/* text size, pixels */
#define MPNG_MIN_W	680	/* narrowest picture: the legend's width */

struct mpng_rgb {
	double r, g, b;
};

/* A light-to-dark sequential ramp (ColorBrewer's "Blues"): empty groups pale, full ones dark. */
static const struct mpng_rgb mpng_ramp[] = {
	{ 0.969, 0.984, 1.000 }, { 0.776, 0.859, 0.937 }, { 0.420, 0.682, 0.839 },
	{ 0.129, 0.443, 0.710 }, { 0.031, 0.188, 0.420 },
};

static struct mpng_rgb mpng_colour(double f)
{
	int n = sizeof(mpng_ramp) / sizeof(mpng_ramp[0]) - 1, i;
	double t;

	if (!(f > 0))
		f = 0;
	if (f > 1)
		f = 1;
	i = f * n >= n ? n - 1 : (int)(f * n);
	t = f * n - i;
	return (struct mpng_rgb){ mpng_ramp[i].r + t * (mpng_ramp[i + 1].r - mpng_ramp[i].r),
				  mpng_ramp[i].g + t * (mpng_ramp[i + 1].g - mpng_ramp[i].g),
				  mpng_ramp[i].b + t * (mpng_ramp[i + 1].b - mpng_ramp[i].b) };
}

/* A panel's grid. */
struct mpng_grid {
	unsigned int per_cell;	/* groups per cell */
	unsigned int cells, cols, rows, px;
	double w, h;
};

static void mpng_layout(const struct map_image *m, struct mpng_grid *g)
{
	g->per_cell = (m->ngroups + MPNG_MAX_CELLS - 1) / MPNG_MAX_CELLS;
	if (!g->per_cell)
		g->per_cell = 1;
	g->cells = (m->ngroups + g->per_cell - 1) / g->per_cell;
	/* about twice as wide as high */
	g->cols = (unsigned int)ceil(sqrt(2.0 * g->cells));
	if (g->cols > g->cells)
		g->cols = g->cells;
	if (!g->cols)
		g->cols = 1;
	g->rows = (g->cells + g->cols - 1) / g->cols;
	g->px = MPNG_PANEL_W / g->cols;
	if (g->px < MPNG_CELL_MIN)
		g->px = MPNG_CELL_MIN;
	if (g->px > MPNG_CELL_MAX)
		g->px = MPNG_CELL_MAX;
	g->w = (double)g->cols * g->px;
	g->h = (double)g->rows * g->px;
}

static const char *mpng_base(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

static void mpng_text(cairo_t *cr, double x, double y, double size, const char *s)
{
	cairo_set_font_size(cr, size);
	cairo_move_to(cr, x, y);
	cairo_show_text(cr, s);
}

/* The "touched" mark: a black corner edged in white, seen on pale and dark cells alike. */
static void mpng_corner(cairo_t *cr, double x, double y, double size)
{
	cairo_move_to(cr, x, y);
	cairo_line_to(cr, x - size, y);
	cairo_line_to(cr, x, y - size);
	cairo_close_path(cr);
	cairo_set_source_rgb(cr, 0, 0, 0);
	cairo_fill_preserve(cr);
	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_set_line_width(cr, 1);
	cairo_stroke(cr);
}

static void mpng_panel(cairo_t *cr, const struct map_image *m, const struct mpng_grid *g, double x0,
		       double y0)
{
	char buf[256];
	double px = g->px, gap = px >= 8 ? 1 : 0;

	cairo_set_source_rgb(cr, 0, 0, 0);
	snprintf(buf, sizeof(buf), "%s%s%s", m->label ? m->label : mpng_base(m->path), m->label ? ": " : "",
		 m->label ? mpng_base(m->path) : "");
	mpng_text(cr, x0, y0 + 15, MPNG_FONT + 1, buf);
	if (g->per_cell > 1)
		snprintf(buf, sizeof(buf), "%u groups (%u a cell), ", m->ngroups, g->per_cell);
	else
		snprintf(buf, sizeof(buf), "%u groups, ", m->ngroups);
	snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%.1f %% used, %.0f %% touched, cv %.2f",
		 m->blocks ? 100.0 * (m->blocks - m->free_blocks) / m->blocks : 0,
		 m->ngroups ? 100.0 * m->touched / m->ngroups : 0, m->used_cv);
	mpng_text(cr, x0, y0 + 33, MPNG_FONT - 1, buf);
	y0 += MPNG_SUB_H;

	for (unsigned int c = 0; c < g->cells; c++) {
		uint64_t used = 0, blocks = 0, data = 0;
		bool super = false, leader = false;
		double x = x0 + (c % g->cols) * px, y = y0 + (c / g->cols) * px;
		struct mpng_rgb col;

		for (unsigned int k = c * g->per_cell; k < (c + 1) * g->per_cell && k < m->ngroups; k++) {
			used += m->groups[k].used;
			blocks += m->groups[k].nblocks;
			data += m->groups[k].data;
			super |= m->groups[k].has_super;
			leader |= m->groups[k].flex_leader;
		}
		col = mpng_colour(blocks ? (double)used / blocks : 0);
		cairo_set_source_rgb(cr, col.r, col.g, col.b);
		cairo_rectangle(cr, x, y, px - gap, px - gap);
		cairo_fill(cr);
		if (leader && px >= 6) {
			cairo_set_source_rgb(cr, 0.85, 0.25, 0.1);
			cairo_set_line_width(cr, px >= 16 ? 2 : 1);
			cairo_rectangle(cr, x + 1, y + 1, px - gap - 2, px - gap - 2);
			cairo_stroke(cr);
		}
		if (data && px >= 8) {
			/* touched: a corner, so the journal's group does not pass for file data */
			mpng_corner(cr, x + px - gap - 1, y + px - gap - 1, px / 2.5);
		}
		if (super && px >= 6) {
			cairo_set_source_rgb(cr, 1, 0.8, 0);
			cairo_arc(cr, x + px / 2.0, y + px / 2.0, px / 6.0 + 0.5, 0, 2 * M_PI);
			cairo_fill(cr);
		}
	}
}

static void mpng_legend(cairo_t *cr, double x0, double y0)
{
	const double bar_w = 200, bar_h = 12;

	for (int i = 0; i < (int)bar_w; i++) {
		struct mpng_rgb c = mpng_colour(i / (bar_w - 1));

		cairo_set_source_rgb(cr, c.r, c.g, c.b);
		cairo_rectangle(cr, x0 + i, y0, 1, bar_h);
		cairo_fill(cr);
	}
	cairo_set_source_rgb(cr, 0, 0, 0);
	cairo_set_line_width(cr, 1);
	cairo_rectangle(cr, x0, y0, bar_w, bar_h);
	cairo_stroke(cr);
	mpng_text(cr, x0, y0 + bar_h + 14, MPNG_FONT - 1, "0 %");
	mpng_text(cr, x0 + bar_w / 2 - 12, y0 + bar_h + 14, MPNG_FONT - 1, "50 %");
	mpng_text(cr, x0 + bar_w - 30, y0 + bar_h + 14, MPNG_FONT - 1, "100 %");
	mpng_text(cr, x0 + bar_w + 16, y0 + 10, MPNG_FONT - 1, "used blocks of the group (metadata included)");
	cairo_set_source_rgb(cr, 1, 0.8, 0);
	cairo_arc(cr, x0 + 6, y0 + bar_h + 34, 4, 0, 2 * M_PI);
	cairo_fill(cr);
	cairo_set_source_rgb(cr, 0, 0, 0);
	mpng_text(cr, x0 + 16, y0 + bar_h + 38, MPNG_FONT - 1, "superblock copy");
	cairo_set_source_rgb(cr, 0.85, 0.25, 0.1);
	cairo_set_line_width(cr, 2);
	cairo_rectangle(cr, x0 + 150, y0 + bar_h + 28, 10, 10);
	cairo_stroke(cr);
	cairo_set_source_rgb(cr, 0, 0, 0);
	mpng_text(cr, x0 + 166, y0 + bar_h + 38, MPNG_FONT - 1,
		  "flex-group leader (its bitmaps and inode tables)");
	mpng_corner(cr, x0 + 470, y0 + bar_h + 39, 12);
	cairo_set_source_rgb(cr, 0, 0, 0);
	mpng_text(cr, x0 + 476, y0 + bar_h + 38, MPNG_FONT - 1, "holds file blocks (touched)");
}

int mpng_write(struct map_image *ms, int n, const char *out)
{
	struct mpng_grid g[RRMAP_MAX_IMAGES];
	double w = MPNG_MARGIN, h = 0, x;
	cairo_surface_t *s;
	cairo_status_t st;
	cairo_t *cr;
	char title[512];
	size_t len;

	for (int i = 0; i < n; i++) {
		double pw;

		mpng_layout(&ms[i], &g[i]);
		/* room for the caption */
		pw = g[i].w > 330 ? g[i].w : 330;
		w += pw + MPNG_MARGIN;
		if (g[i].h + MPNG_SUB_H > h)
			h = g[i].h + MPNG_SUB_H;
	}
	if (w < MPNG_MIN_W)
		w = MPNG_MIN_W;
	h += MPNG_TITLE_H + MPNG_LEGEND_H + MPNG_MARGIN;
	s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(w), (int)ceil(h));
	cr = cairo_create(s);
	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

	cairo_set_source_rgb(cr, 0, 0, 0);
	len = (size_t)snprintf(title, sizeof(title), "Block groups by used fraction:");
	for (int i = 0; i < n && len < sizeof(title); i++)
		len += (size_t)snprintf(title + len, sizeof(title) - len, "%s %s%s%s%s", i ? "," : "",
					mpng_base(ms[i].path), ms[i].label ? " (" : "",
					ms[i].label ? ms[i].label : "", ms[i].label ? ")" : "");
	mpng_text(cr, MPNG_MARGIN, 26, MPNG_FONT + 4, title);
	mpng_text(cr, MPNG_MARGIN, 46, MPNG_FONT - 1,
		  "one cell per block group (or run of groups, as captioned), left to right, then down");

	x = MPNG_MARGIN;
	for (int i = 0; i < n; i++) {
		mpng_panel(cr, &ms[i], &g[i], x, MPNG_TITLE_H);
		x += (g[i].w > 330 ? g[i].w : 330) + MPNG_MARGIN;
	}
	mpng_legend(cr, MPNG_MARGIN, h - MPNG_LEGEND_H);

	st = cairo_status(cr);
	cairo_destroy(cr);
	if (st == CAIRO_STATUS_SUCCESS)
		st = cairo_surface_write_to_png(s, out);
	cairo_surface_destroy(s);
	/* give back the font caches the text took (LeakSanitizer reports them otherwise) */
	cairo_debug_reset_static_data();
	FcFini();
	if (st != CAIRO_STATUS_SUCCESS) {
		fprintf(stderr, "rrmap: %s: %s\n", out, cairo_status_to_string(st));
		return -1;
	}
	return 0;
}
