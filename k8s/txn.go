package k8s

import "time"

// A change of a function (deploy, update, scale, delete) is a transaction:
// when its record cannot be written, the function is put back as it was
// before the change (state.rollback), and the writer writes it so again.

// fnSnapshot is a function as it was before a change; fn is nil when it
// did not exist.
type fnSnapshot struct {
	key string
	fn  *function
}

// snapshot copies function k deeply enough to put it back: its groups'
// booking lists and its pending replicas.
func (s *state) snapshot(k string) fnSnapshot {
	fn, ok := s.functions[k]
	if !ok {
		return fnSnapshot{key: k}
	}
	c := *fn
	c.groups = make(map[string]*group, len(fn.groups))
	for name, g := range fn.groups {
		gc := *g
		gc.ids = append([]string(nil), g.ids...)
		c.groups[name] = &gc
	}
	c.pending = make([]*pendingReplica, len(fn.pending))
	for i, p := range fn.pending {
		pc := *p
		c.pending[i] = &pc
	}
	return fnSnapshot{key: k, fn: &c}
}

// rollback puts the function back as snap holds it. Bookings made since
// are released, except in a group whose pods may run them (mayRun: its
// Deployment was written since): they drain like any replica taken away. Bookings taken away since, still draining, go back
// to their groups; one freed meanwhile (its drain ended, its node lost) is
// booked again where it was, or becomes pending when that is taken.
func (s *state) rollback(snap fnSnapshot, mayRun func(ns, group string) bool, now time.Time) {
	ns, _ := splitKey(snap.key)
	before := map[string]bool{}
	if snap.fn != nil {
		for _, g := range snap.fn.groups {
			for _, id := range g.ids {
				before[id] = true
			}
		}
	}
	if cur, ok := s.functions[snap.key]; ok {
		for _, g := range cur.sortedGroups() {
			var made []string
			for _, id := range g.ids {
				if !before[id] {
					made = append(made, id)
				}
			}
			if len(made) == 0 {
				continue
			}
			if mayRun(ns, g.name) {
				d, ok := s.drains[fnKey(ns, g.name)]
				if !ok {
					d = &drain{fn: snap.key, ns: ns, group: g.name}
					s.drains[fnKey(ns, g.name)] = d
				}
				d.ids = append(d.ids, made...)
				continue
			}
			for _, id := range made {
				_ = s.alloc.Release(id, now) // booked by this change: held
			}
		}
		delete(s.functions, snap.key)
	}
	if snap.fn == nil {
		return
	}
	fn := snap.fn
	held := s.alloc.Placements()
	for _, g := range fn.sortedGroups() {
		s.undrain(ns, g.name, g.ids)
		kept := g.ids[:0]
		for _, id := range g.ids {
			if _, ok := held[id]; ok {
				kept = append(kept, id)
				continue
			}
			if err := s.alloc.Restore(id, g.placement); err == nil {
				s.cache.Preload(id, fn.plan.Request.Model, modelBytes(fn.plan), now)
				kept = append(kept, id)
				continue
			}
			fn.pending = append(fn.pending, &pendingReplica{id: newReplicaID(fn.spec.Name()), config: g.config, since: now.UTC()})
		}
		g.ids = kept
		if len(g.ids) == 0 {
			delete(fn.groups, g.name)
		}
	}
	for _, p := range fn.pending {
		if _, ok := held[p.id]; ok {
			// Placed by the change into a group that drains it now: the
			// booking keeps the ID, the pending replica takes another.
			p.id = newReplicaID(fn.spec.Name())
		}
	}
	s.functions[snap.key] = fn
}

// undrain takes ids out of group's drain: they belong to the group again.
func (s *state) undrain(ns, group string, ids []string) {
	d, ok := s.drains[fnKey(ns, group)]
	if !ok {
		return
	}
	back := map[string]bool{}
	for _, id := range ids {
		back[id] = true
	}
	kept := d.ids[:0]
	for _, id := range d.ids {
		if !back[id] {
			kept = append(kept, id)
		}
	}
	d.ids = kept
	if len(d.ids) == 0 {
		delete(s.drains, fnKey(ns, group))
	}
}
