// fmt, compiled once for each of our libraries instead of header-only in every file that formats.
// Its non-template functions are defined by format-inl.h (FMT_FUNC is empty without FMT_HEADER_ONLY:
// ordinary, hidden definitions here); the templates fmt's headers declare but do not define are
// instantiated below, for the types fmt itself instantiates them for. A missing one is a link error
// (libuvmpool.so links with -z defs, the simulator with --no-undefined), never a symbol taken from
// another fmt in the program. Hidden like everything else in our libraries: programs we are loaded
// into ship their own fmt.
#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
