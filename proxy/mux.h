/*
 * mux: the shared backend connection (multiplex = on); see mux.c.
 */
#ifndef TTLG_MUX_H
#define TTLG_MUX_H

#include <stdint.h>

/* 1 while a shared connection is open (the control connection then probes
 * whether it may still be shared). */
int mux_in_use(void);

/* Shutdown: close the shared connection (every session is gone). */
void mux_shutdown(void);

/* The backend address changed. A reload: sessions owed replies on the old
 * one end as if it had closed; the next request opens a new one. lost (a
 * Sentinel switch): every session on it ends, as when Redis goes away. */
void mux_backend_changed(int lost);

#endif
