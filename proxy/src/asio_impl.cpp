// The one translation unit that compiles Asio, Asio.SSL and Beast
// (BOOST_ASIO_SEPARATE_COMPILATION / BOOST_BEAST_SEPARATE_COMPILATION), so that the
// other proxy sources only parse the declarations: rebuilds stay fast on two cores.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
