// overloaded{...}: visits a message variant with one lambda per alternative.
#pragma once

namespace troupe {

template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

}  // namespace troupe
