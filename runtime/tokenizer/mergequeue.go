package tokenizer

// mergeQueue is the priority queue of candidate merges that SentencePiece
// and BPE share; they differ only in which pair wins (before). Its sift
// steps are container/heap's, so pairs that tie pop in the same order as
// they did through container/heap, and nothing is boxed per push.
type mergeQueue[T any] struct {
	items  []T
	before func(a, b *T) bool
}

func (q *mergeQueue[T]) Len() int { return len(q.items) }

func (q *mergeQueue[T]) reset() { q.items = q.items[:0] }

func (q *mergeQueue[T]) push(x T) {
	q.items = append(q.items, x)
	q.up(len(q.items) - 1)
}

func (q *mergeQueue[T]) pop() T {
	n := len(q.items) - 1
	q.items[0], q.items[n] = q.items[n], q.items[0]
	q.down(0, n)
	x := q.items[n]
	q.items = q.items[:n]
	return x
}

func (q *mergeQueue[T]) less(i, j int) bool { return q.before(&q.items[i], &q.items[j]) }

func (q *mergeQueue[T]) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !q.less(j, i) {
			break
		}
		q.items[i], q.items[j] = q.items[j], q.items[i]
		j = i
	}
}

func (q *mergeQueue[T]) down(i0, n int) {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && q.less(j2, j1) {
			j = j2
		}
		if !q.less(j, i) {
			break
		}
		q.items[i], q.items[j] = q.items[j], q.items[i]
		i = j
	}
}
