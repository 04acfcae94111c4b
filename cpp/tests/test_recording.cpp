// Recordings (cpp/runtime/recording.h): a replay computes what the eager call computed, with
// dynamic parameters recomputed from the scalar inputs (KV-cache style write position, attended
// length, rope offset, scalar operand); it is refused once a buffer it uses was released; the
// memory it owns is freed when it is dropped; an abandoned recording never replays; a recorded
// optimizer step takes its rate and bias corrections from host scalar inputs added while recording,
// and state made while the recording is paused is outside state, held weakly.
#include <cmath>
#include <cstring>

#include "runtime/recording.h"
#include "test_util.h"

using namespace tl;

namespace {

AffinePtr slot(int i, double constant = 0) {
  auto a = std::make_shared<Affine>();
  a->constant = constant;
  a->terms.push_back({i, 1.0});
  return a;
}

// One "decode step": write x*scale at row pos of cache, rope it at pos, attend over rows 0..pos.
Tensor step(const Tensor& cache, const Tensor& x, DynInt pos, DynScalar scale) {
  Tensor scaled = binary_scalar(BinaryOp::Mul, x, scale, true, false);  // [1, 2, 4]
  Tensor roped = rope(scaled, pos, 10000.0, false);
  DynInt end(pos.value + 1, pos.form ? std::make_shared<Affine>(Affine{1.0, pos.form->terms}) : nullptr);
  copy_into(slice_dynamic(cache, 0, pos, end), roped);
  Tensor keys = slice_dynamic(cache, 0, 0, end);
  return attention(roped, keys, keys, std::nullopt, std::nullopt, true, pos);
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

}  // namespace

int main() {
  shutdown_device();
  auto dev = current_device();
  const int64_t cap = 8;
  Tensor cache = full({cap, 2, 4}, 0.0, DType::F32);
  Tensor cache_ref = full({cap, 2, 4}, 0.0, DType::F32);

  // Record step 0 with the scalar inputs (pos = 0, scale = 0.5).
  auto rec = std::make_shared<Recording>(2);
  Tensor x0 = tl_test::host_tensor({1, 2, 4}, 1.0f);
  rec->begin();
  Tensor slot_x = rec->bind_input(x0);
  Tensor out = step(cache, slot_x, DynInt(0, slot(0)), DynScalar(0.5, slot(1)));
  slot_x = Tensor();  // a slot still held here would count as escaping
  std::vector<Tensor> outs = rec->finish({out});
  out = Tensor();
  CHECK(rec->ready());
  CHECK(rec->reason().empty());
  CHECK(rec->n_dynamic() >= 4);
  std::vector<float> first = tl_test::read(outs[0]);
  std::vector<float> first_ref = tl_test::read(step(cache_ref, x0, 0, 0.5));
  CHECK(same(first, first_ref));

  // Replays at positions 1..cap-1 with changing inputs equal eager steps bitwise.
  for (int64_t p = 1; p < cap; ++p) {
    Tensor xp = tl_test::host_tensor({1, 2, 4}, 0.25f * static_cast<float>(p));
    double scale = 0.5 + 0.125 * static_cast<double>(p);
    std::vector<Tensor> got = rec->replay({static_cast<double>(p), scale}, {xp});
    Tensor want = step(cache_ref, xp, p, scale);
    CHECK(same(tl_test::read(got[0]), tl_test::read(want)));
  }
  CHECK(same(tl_test::read(cache), tl_test::read(cache_ref)));

  // Out of range: position cap writes past the cache. Refused before anything runs.
  bool threw = false;
  try {
    rec->replay({static_cast<double>(cap), 1.0}, {x0});
  } catch (const ShapeError&) {
    threw = true;
  }
  CHECK(threw);
  // A different input shape is a signature mismatch.
  threw = false;
  try {
    rec->replay({1.0, 1.0}, {tl_test::host_tensor({1, 2, 2}, 1.0f)});
  } catch (const ShapeError&) {
    threw = true;
  }
  CHECK(threw);

  // Owned buffers stay out of the pool while the recording lives and come back when it goes.
  dev->synchronize();
  int64_t live_with = dev->pool().stats().live_bytes;
  CHECK(rec->owned_bytes() > 0);

  // The cache is released ("resized"): the replay is refused, not run on freed memory.
  cache = Tensor();
  threw = false;
  try {
    rec->replay({1.0, 1.0}, {x0});
  } catch (const ReplayRefused&) {
    threw = true;
  }
  CHECK(threw);
  int64_t owned = rec->owned_bytes();
  rec.reset();
  dev->synchronize();
  CHECK(dev->pool().stats().live_bytes <= live_with - owned - cap * 2 * 4 * 4);

  // A host read while recording abandons it: the call completes eagerly, replay is refused.
  auto rec2 = std::make_shared<Recording>(0);
  rec2->begin();
  Tensor y = binary_scalar(BinaryOp::Add, x0, 1.0, true, false);
  std::vector<float> host = tl_test::read(y);  // to_host
  CHECK(host[0] == 2.0f);
  std::vector<Tensor> outs2 = rec2->finish({y});
  CHECK(!rec2->ready());
  CHECK(!rec2->reason().empty());
  CHECK(tl_test::read(outs2[0])[0] == 2.0f);
  threw = false;
  try {
    rec2->replay({}, {});
  } catch (const ReplayRefused&) {
    threw = true;
  }
  CHECK(threw);

  // A tensor made inside and kept outside (escaping) abandons.
  auto rec3 = std::make_shared<Recording>(0);
  rec3->begin();
  Tensor kept = binary_scalar(BinaryOp::Add, x0, 1.0, true, false);
  Tensor result = binary_scalar(BinaryOp::Mul, kept, 2.0, true, false);
  rec3->finish({result});
  CHECK(!rec3->ready());

  // A training step: the Adam update's lr and bias corrections are scalar inputs added while
  // recording (add_scalar_input); m and v are made while paused, so they are not the recording's.
  Tensor w = tl_test::host_tensor({64}, 0.5f), w_ref = tl_test::host_tensor({64}, 0.5f);
  Tensor m_ref = full({64}, 0.0, DType::F32), v_ref = full({64}, 0.0, DType::F32);
  OptimizerConfig adam;
  Tensor gx = tl_test::host_tensor({64}, 0.0f);
  auto rec4 = std::make_shared<Recording>(0);
  rec4->begin();
  Tensor slot_g = rec4->bind_input(gx);
  rec4->pause();
  Tensor m = full({64}, 0.0, DType::F32), v = full({64}, 0.0, DType::F32);
  rec4->resume();
  const int s_lr = rec4->add_scalar_input(), s_b1 = rec4->add_scalar_input(), s_b2 = rec4->add_scalar_input();
  auto bias = [](double beta, int t) { return 1.0 - std::pow(beta, t); };
  Tensor g2 = binary_scalar(BinaryOp::Mul, slot_g, 2.0, true, false);
  optimizer_update(adam, w, g2, m, v, DynScalar(0.1, slot(s_lr)), DynScalar(bias(0.9, 1), slot(s_b1)),
                   DynScalar(bias(0.999, 1), slot(s_b2)));
  Tensor loss = reduce(ReduceOp::Sum, g2, std::nullopt, false);
  g2 = Tensor();
  slot_g = Tensor();
  std::vector<Tensor> outs4 = rec4->finish({loss});
  loss = Tensor();
  CHECK(rec4->ready());
  CHECK(rec4->n_scalars() == 3);
  optimizer_update(adam, w_ref, binary_scalar(BinaryOp::Mul, gx, 2.0, true, false), m_ref, v_ref, 0.1,
                   bias(0.9, 1), bias(0.999, 1));
  for (int t = 2; t <= 6; ++t) {
    Tensor g = tl_test::host_tensor({64}, 0.1f * static_cast<float>(t));
    double lr = 0.1 / t;
    rec4->replay({lr, bias(0.9, t), bias(0.999, t)}, {g});
    optimizer_update(adam, w_ref, binary_scalar(BinaryOp::Mul, g, 2.0, true, false), m_ref, v_ref, lr,
                     bias(0.9, t), bias(0.999, t));
  }
  CHECK(same(tl_test::read(w), tl_test::read(w_ref)));
  CHECK(same(tl_test::read(m), tl_test::read(m_ref)));
  CHECK(same(tl_test::read(v), tl_test::read(v_ref)));
  CHECK(rec4->cannot_replay().empty());
  v = Tensor();  // the optimizer dropped its state: refused, before anything runs
  CHECK(!rec4->cannot_replay().empty());
  threw = false;
  try {
    rec4->replay({0.1, 0.5, 0.5}, {gx});
  } catch (const ReplayRefused&) {
    threw = true;
  }
  CHECK(threw);
  return tl_test::test_result("test_recording");
}
