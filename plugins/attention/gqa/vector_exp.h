// e^x for x <= 0 (scores minus their running max, -inf included) over a vector, for the instruction sets'
// attention files: Cody-Waite reduction x = n ln2 + r, the Cephes degree-5 polynomial for e^r (about 1 ulp),
// then 2^n. Below -87, e^x is under the smallest normal float and the result is exactly 0, so no denormal
// reaches later FMAs. Internal linkage, like the drivers that use it.
//
// isa must provide: vec; set1, add, mul, fmadd, fnmadd (c - a * b), max; round(v) to the nearest integer;
// times_pow2(y, n): y * 2^n for integral n in [-126, 0]; zero_below(v, x, bound): v where x >= bound, else 0.
#pragma once

namespace troupe::gqa {
namespace {

template <class isa>
inline typename isa::vec exp_nonpositive(typename isa::vec x) {
    constexpr float lowest = -87.0f;
    const typename isa::vec xc = isa::max(x, isa::set1(lowest));  // keeps n finite for -inf
    const typename isa::vec n = isa::round(isa::mul(xc, isa::set1(1.44269504088896341f)));
    typename isa::vec r = isa::fnmadd(n, isa::set1(0.693359375f), xc);
    r = isa::fnmadd(n, isa::set1(-2.12194440e-4f), r);
    typename isa::vec p = isa::set1(1.9875691500e-4f);
    p = isa::fmadd(p, r, isa::set1(1.3981999507e-3f));
    p = isa::fmadd(p, r, isa::set1(8.3334519073e-3f));
    p = isa::fmadd(p, r, isa::set1(4.1665795894e-2f));
    p = isa::fmadd(p, r, isa::set1(1.6666665459e-1f));
    p = isa::fmadd(p, r, isa::set1(5.0000001201e-1f));
    const typename isa::vec y = isa::add(isa::fmadd(isa::mul(p, r), r, r), isa::set1(1.0f));
    return isa::zero_below(isa::times_pow2(y, n), x, lowest);
}

}  // namespace
}  // namespace troupe::gqa
